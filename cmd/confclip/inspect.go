package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v3"

	"github.com/confclip/confclip"
	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/pipeline"
	"github.com/confclip/confclip/tools"
)

// Version is the program's version (set with -ldflags -X at release time).
var Version = "0.1.0-dev"

func init() {
	register(func() *cli.Command {
		return &cli.Command{
			Name:  "version",
			Usage: "print the program version, the llama.cpp commit, compiled backends, the devices they found (the names --device takes) with their memory, the CPU kernels chosen and CPU features",
			Flags: []cli.Flag{
				&cli.BoolFlag{Name: "licenses", Usage: "print confclip's licence and those of the works it links (llama.cpp and ggml)"},
			},
			Action: func(ctx context.Context, c *cli.Command) error {
				if _, err := loadConfig(c); err != nil {
					return err
				}
				if c.Bool("licenses") {
					fmt.Fprintf(c.Root().Writer, "confclip %s\n\n%s\n%s", Version, confclip.License, confclip.ThirdPartyNotices)
					return nil
				}
				b := tools.Build()
				w := c.Root().Writer
				fmt.Fprintf(w, "confclip %s (%s, %s)\n", Version, b.Platform, b.GoVersion)
				if b.LlamaCommit == b.LlamaPin {
					fmt.Fprintf(w, "llama.cpp %s, the pin (libraries %s)\n", b.LlamaCommit, b.BuildStamp)
				} else {
					fmt.Fprintf(w, "llama.cpp %s, not the pin %s: built with LLAMA_SOURCE (libraries %s)\n", b.LlamaCommit, b.LlamaPin, b.BuildStamp)
				}
				fmt.Fprintf(w, "backends: %s\n", strings.Join(b.Backends, ", "))
				fmt.Fprintln(w, "devices:")
				found := map[string]bool{}
				for _, d := range b.Devices {
					fmt.Fprintf(w, "  %s (%s, %s backend): %s, %d MiB free of %d MiB\n", d.Name, d.Type, d.Backend, d.Description, d.MemFree>>20, d.MemTotal>>20)
					found[d.Backend] = true
				}
				// a GPU backend compiled in that found nothing: say so, and
				// that everything runs on the CPU
				for _, name := range llama.BackendNames() {
					if !found[name] {
						fmt.Fprintf(w, "  no %s device: this build's %s backend found none, so it runs on the CPU\n", name, name)
					}
				}
				if v, built := llama.CPUVariant(); v != "" {
					fmt.Fprintf(w, "cpu kernels: %s, chosen for this CPU at start (built: %s; CONFCLIP_CPU_VARIANT=NAME forces one)\n", v, strings.Join(built, ", "))
				} else {
					fmt.Fprintln(w, "cpu kernels: the build's one set (no choice at start)")
				}
				fmt.Fprintf(w, "system: %s\n", b.System)
				fmt.Fprintf(w, "openmp: threads spin %d times at a barrier before they sleep (GOMP_SPINCOUNT; docs/speed.md, \"A busy machine\")\n", llama.OpenMPSpinCount())
				return nil
			},
		}
	})
	register(func() *cli.Command {
		return &cli.Command{
			Name:      "inspect",
			Usage:     "print a GGUF model's (or LoRA adapter's) metadata",
			ArgsUsage: "MODEL.gguf",
			Flags: []cli.Flag{
				&cli.BoolFlag{Name: "json", Usage: "print JSON"},
				&cli.BoolFlag{Name: "vocab-only", Usage: "load only the tokenizer"},
			},
			Action: inspectCmd,
		}
	})
	register(func() *cli.Command {
		return &cli.Command{
			Name:      "tokenize",
			Usage:     "print the token ids and pieces of a text",
			ArgsUsage: "TEXT",
			Flags: []cli.Flag{
				stringOpt("model", []string{"m"}, "GGUF model `FILE`, vocab-only files too ([model] path)", func(c *pipeline.Config) *string { return &c.Model.Path }),
				&cli.BoolFlag{Name: "no-special", Usage: "do not add BOS/EOS"},
				&cli.BoolFlag{Name: "parse-special", Usage: "turn special-token text such as <|im_start|> into its id"},
			},
			Action: tokenizeCmd,
		}
	})
}

func inspectCmd(ctx context.Context, c *cli.Command) error {
	if _, err := loadConfig(c); err != nil {
		return err
	}
	if c.NArg() != 1 {
		return cli.Exit("inspect: give one MODEL.gguf", 2)
	}
	fi, err := tools.Inspect(c.Args().First(), c.Bool("vocab-only"))
	if err != nil {
		return err
	}
	w := c.Root().Writer
	if c.Bool("json") {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(fi)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "%s\t%v\n", k, v) }
	row("file", fi.Path)
	row("file size", fi.FileSize)
	if a := fi.Adapter; a != nil {
		row("type", "adapter ("+a.AdapterType+")")
		row("arch", a.Architecture)
		row("alpha", a.Alpha)
		row("tensors", fi.Tensors)
		return tw.Flush()
	}
	info := fi.Info
	row("arch", info.Architecture)
	row("description", info.Description)
	row("parameters", info.Params)
	row("file type", info.FileType)
	row("tensors", fi.Tensors)
	row("context (train)", info.CtxTrain)
	row("embedding", info.Embd)
	row("blocks", info.Layers)
	row("heads / kv heads", fmt.Sprintf("%d / %d", info.Heads, info.HeadsKV))
	row("vocab", fmt.Sprintf("%d (%s)", info.Vocab, info.VocabType))
	row("bos / eos / eot", fmt.Sprintf("%d / %d / %d", info.BOS, info.EOS, info.EOT))
	tmpl := info.ChatTemplate
	if tmpl == "" {
		tmpl = "(none: give one with --chat-template or [model] chat_template)"
	} else if len(tmpl) > 60 {
		tmpl = fmt.Sprintf("%q... (%d bytes)", tmpl[:60], len(tmpl))
	}
	row("chat template", tmpl)
	return tw.Flush()
}

func tokenizeCmd(ctx context.Context, c *cli.Command) error {
	cfg, err := loadConfig(c)
	if err != nil {
		return err
	}
	if c.NArg() != 1 {
		return cli.Exit("tokenize: give one TEXT", 2)
	}
	toks, err := tools.Tokenize(cfg.Model.Path, c.Args().First(), !c.Bool("no-special"), c.Bool("parse-special"))
	if err != nil {
		return err
	}
	for _, t := range toks {
		fmt.Fprintf(c.Root().Writer, "%6d %q\n", t.ID, t.Piece)
	}
	return nil
}
