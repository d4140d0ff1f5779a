package main

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/confclip/confclip/llama"
)

// Version is the program's version (set with -ldflags -X at release time).
var Version = "0.1.0-dev"

func init() {
	register(&cli.Command{
		Name:  "version",
		Usage: "print the program version, the llama.cpp commit, compiled backends, devices with their memory and CPU features",
		Action: func(c *cli.Context) error {
			if _, err := loadConfig(c); err != nil {
				return err
			}
			fmt.Printf("confclip %s (%s/%s, %s)\n", Version, runtime.GOOS, runtime.GOARCH, runtime.Version())
			fmt.Printf("llama.cpp %s (libraries %s)\n", llama.LlamaCommit, llama.BuildStamp)
			fmt.Printf("backends: %s\n", strings.Join(llama.BackendNames(), ", "))
			fmt.Println("devices:")
			for _, d := range llama.Devices() {
				fmt.Printf("  %s (%s, %s backend): %s, %d MiB free of %d MiB\n", d.Name, d.Type, d.Backend, d.Description, d.MemFree>>20, d.MemTotal>>20)
			}
			fmt.Printf("system: %s\n", llama.SystemInfo())
			return nil
		},
	})
	register(&cli.Command{
		Name:      "inspect",
		Usage:     "print a GGUF model's metadata",
		ArgsUsage: "MODEL.gguf",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print JSON"},
			&cli.BoolFlag{Name: "vocab-only", Usage: "load only the tokenizer"},
		},
		Action: inspect,
	})
	register(&cli.Command{
		Name:      "tokenize",
		Usage:     "print the token ids and pieces of a text",
		ArgsUsage: "TEXT",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "model", Aliases: []string{"m"}, Usage: "GGUF `MODEL` (vocab-only files work)"},
			&cli.BoolFlag{Name: "no-special", Usage: "do not add BOS/EOS"},
			&cli.BoolFlag{Name: "parse-special", Usage: "turn special-token text such as <|im_start|> into its id"},
		},
		Action: tokenize,
	})
}

func inspect(c *cli.Context) error {
	if _, err := loadConfig(c); err != nil {
		return err
	}
	if c.NArg() != 1 {
		return cli.Exit("inspect: give one MODEL.gguf", 2)
	}
	path := c.Args().First()
	g, err := llama.OpenGGUF(path)
	if err != nil {
		return err
	}
	nTensors, fileSize := len(g.Tensors()), g.FileSize()
	vocabOnly := c.Bool("vocab-only") || nTensors == 0
	if g.String("general.type") == "adapter" {
		defer g.Close()
		return inspectAdapter(c, g)
	}
	g.Close()
	m, err := llama.LoadModel(path, llama.ModelParams{VocabOnly: vocabOnly})
	if err != nil {
		return err
	}
	defer m.Close()
	info := m.Info()
	if c.Bool("json") {
		out := struct {
			Path     string `json:"path"`
			FileSize int64  `json:"file_size"`
			Tensors  int    `json:"tensors"`
			llama.Info
		}{path, fileSize, nTensors, info}
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "%s\t%v\n", k, v) }
	row("file", path)
	row("file size", fileSize)
	row("arch", info.Architecture)
	row("description", info.Description)
	row("parameters", info.Params)
	row("file type", info.FileType)
	row("tensors", nTensors)
	row("context (train)", info.CtxTrain)
	row("embedding", info.Embd)
	row("blocks", info.Layers)
	row("heads / kv heads", fmt.Sprintf("%d / %d", info.Heads, info.HeadsKV))
	row("vocab", fmt.Sprintf("%d (%s)", info.Vocab, info.VocabType))
	row("bos / eos / eot", fmt.Sprintf("%d / %d / %d", info.BOS, info.EOS, info.EOT))
	tmpl := info.ChatTemplate
	if tmpl == "" {
		tmpl = "(none)"
	} else if len(tmpl) > 60 {
		tmpl = fmt.Sprintf("%q... (%d bytes)", tmpl[:60], len(tmpl))
	}
	row("chat template", tmpl)
	return tw.Flush()
}

func tokenize(c *cli.Context) error {
	cfg, err := loadConfig(c)
	if err != nil {
		return err
	}
	path := cfg.Model.Path
	if c.IsSet("model") {
		path = c.String("model")
	}
	if path == "" {
		return cli.Exit("tokenize: --model is required", 2)
	}
	if c.NArg() != 1 {
		return cli.Exit("tokenize: give one TEXT", 2)
	}
	m, err := llama.LoadModel(path, llama.ModelParams{VocabOnly: true})
	if err != nil {
		return err
	}
	defer m.Close()
	toks, err := m.Tokenize(c.Args().First(), !c.Bool("no-special"), c.Bool("parse-special"))
	if err != nil {
		return err
	}
	for _, t := range toks {
		p, err := m.TokenPiece(t, true)
		if err != nil {
			return err
		}
		fmt.Printf("%6d %q\n", t, p)
	}
	return nil
}

// inspectAdapter prints a LoRA adapter's metadata (it needs no model).
func inspectAdapter(c *cli.Context, g *llama.GGUF) error {
	alpha, _ := g.Get("adapter.lora.alpha")
	info := struct {
		Path         string `json:"path"`
		FileSize     int64  `json:"file_size"`
		Type         string `json:"type"`
		Architecture string `json:"architecture"`
		AdapterType  string `json:"adapter_type"`
		Alpha        any    `json:"alpha"`
		Tensors      int    `json:"tensors"`
	}{g.Path(), g.FileSize(), "adapter", g.String("general.architecture"), g.String("adapter.type"), alpha, len(g.Tensors())}
	if c.Bool("json") {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(info)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "file\t%s\nfile size\t%d\ntype\tadapter (%s)\narch\t%s\nalpha\t%v\ntensors\t%d\n",
		info.Path, info.FileSize, info.AdapterType, info.Architecture, info.Alpha, info.Tensors)
	return tw.Flush()
}
