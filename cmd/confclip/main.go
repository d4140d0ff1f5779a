// Command confclip runs reinforcement learning with verifiable rewards on GGUF
// models through llama.cpp. This package is wiring only: flags and config in
// (flags.go), calls into pipeline/, progress events and results out
// (render.go). Every command's work is a pipeline function a Go program can
// call too.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"

	"github.com/urfave/cli/v3"

	// Parquet prompt files and training sets.
	_ "github.com/confclip/confclip/dataset/parquetio"
)

// commands holds one constructor per command, filled by the init functions
// of the files beside this one. Constructors, not values: a parsed command
// keeps its flags' values, and the tests run the program many times.
var commands []func() *cli.Command

func register(f func() *cli.Command) { commands = append(commands, f) }

func newApp() *cli.Command {
	cmds := make([]*cli.Command, len(commands))
	for i, f := range commands {
		cmds[i] = f()
	}
	sort.Slice(cmds, func(i, j int) bool { return cmds[i].Name < cmds[j].Name })
	for _, c := range cmds {
		// Stop strings and prompts hold commas: one value per flag.
		c.DisableSliceFlagSeparator = true
		c.OnUsageError = usageError
	}
	return &cli.Command{
		Name:  "confclip",
		Usage: "RL with verifiable rewards and the ConfClip reward on GGUF models, through llama.cpp",
		// Root flags are inherited: --config and --verbose work on every
		// command, before or after its name.
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "config", Usage: "TOML config `FILE` (flags win over it)", Sources: cli.EnvVars("CONFCLIP_CONFIG")},
			&cli.BoolFlag{Name: "verbose", Aliases: []string{"v"}, Usage: "log debug output, llama.cpp's log included"},
		},
		Before: func(ctx context.Context, c *cli.Command) (context.Context, error) {
			if c.Bool("verbose") {
				slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})))
			}
			return ctx, nil
		},
		Action: func(ctx context.Context, c *cli.Command) error {
			if c.NArg() == 0 {
				return cli.ShowRootCommandHelp(c)
			}
			msg := fmt.Sprintf("no command %q", c.Args().First())
			if s := cli.SuggestCommand(c.Commands, c.Args().First()); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			return cli.Exit(msg+"; confclip --help lists them", 2)
		},
		Commands:              cmds,
		EnableShellCompletion: true,
		OnUsageError:          usageError,
		ExitErrHandler:        func(context.Context, *cli.Command, error) {},
	}
}

// usageError says what was wrong in one line, with the closest flag name
// when a flag is unknown, instead of the whole help.
func usageError(_ context.Context, c *cli.Command, err error, _ bool) error {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
		bare := strings.TrimLeft(name, "-")
		if len(bare) > 1 { // the flag as it was typed: --name, not Go's -name
			msg = "flag provided but not defined: --" + bare
		}
		flags := append(append([]cli.Flag{}, c.Flags...), c.Root().Flags...)
		if s := cli.SuggestFlag(flags, bare, true); s != "" {
			msg += fmt.Sprintf(" (did you mean %s?)", s)
		}
	}
	return cli.Exit(fmt.Sprintf("%s: %s; see %s --help", c.FullName(), msg, c.FullName()), 2)
}
