// Command confclip runs reinforcement learning with verifiable rewards on GGUF
// models through llama.cpp. This package is wiring only: flags and config in,
// calls into pipeline/ and the packages below it, progress and summaries out.
package main

import (
	"fmt"
	"log/slog"
	"os"
	"sort"

	"github.com/urfave/cli/v2"

	"github.com/confclip/confclip/pipeline"
)

// commands is filled by the init functions of the files beside this one, one
// file per command.
var commands []*cli.Command

func register(c *cli.Command) { commands = append(commands, c) }

// configFlag is the global --config flag read by every command.
var configFlag = &cli.StringFlag{Name: "config", Usage: "TOML config `FILE` (flags win over it)", EnvVars: []string{"CONFCLIP_CONFIG"}}

// verboseFlag turns on debug logging, llama.cpp's own log included.
var verboseFlag = &cli.BoolFlag{Name: "verbose", Aliases: []string{"v"}, Usage: "log debug output, llama.cpp's log included"}

// loadConfig reads the --config file (or the defaults when there is none).
func loadConfig(c *cli.Context) (pipeline.Config, error) {
	return pipeline.LoadConfig(c.String("config"))
}

func newApp() *cli.App {
	sort.Slice(commands, func(i, j int) bool { return commands[i].Name < commands[j].Name })
	return &cli.App{
		Name:  "confclip",
		Usage: "RL with verifiable rewards and the ConfClip reward on GGUF models, through llama.cpp",
		Flags: []cli.Flag{configFlag, verboseFlag},
		Before: func(c *cli.Context) error {
			if c.Bool("verbose") {
				slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})))
			}
			return nil
		},
		Commands:             commands,
		EnableBashCompletion: true,
		ExitErrHandler:       func(*cli.Context, error) {},
	}
}

func main() {
	if err := newApp().Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "confclip:", err)
		code := 1
		if ec, ok := err.(cli.ExitCoder); ok && ec.ExitCode() != 0 {
			code = ec.ExitCode()
		}
		os.Exit(code)
	}
}
