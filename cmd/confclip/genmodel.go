package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/modelgen"
)

func init() {
	register(&cli.Command{
		Name:  "gen-model",
		Usage: "write a small deterministic GGUF model with random weights (for tests and benchmarks)",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "out", Aliases: []string{"o"}, Required: true, Usage: "output `FILE`.gguf"},
			&cli.StringFlag{Name: "size", Value: "tiny", Usage: "tiny (about 100K parameters) or bench (about 100M, llama only)"},
			&cli.StringFlag{Name: "arch", Value: "llama", Usage: "architecture: " + strings.Join(modelgen.Archs, ", ")},
			&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "weight RNG seed"},
			&cli.StringFlag{Name: "quantize", Usage: "quantize with llama.cpp's quantizer: " + strings.Join(llama.QuantTypes(), ", ")},
		},
		Action: func(c *cli.Context) error {
			var s modelgen.Spec
			switch c.String("size") {
			case "tiny":
				var err error
				if s, err = modelgen.TinyArch(c.String("arch")); err != nil {
					return cli.Exit("gen-model: --arch: "+err.Error(), 2)
				}
			case "bench":
				if c.String("arch") != "llama" {
					return cli.Exit(fmt.Sprintf("gen-model: --size bench is a llama model; --arch %q needs --size tiny", c.String("arch")), 2)
				}
				s = modelgen.Bench()
			default:
				return cli.Exit(fmt.Sprintf("gen-model: --size %q: want tiny or bench", c.String("size")), 2)
			}
			s.Seed = c.Uint64("seed")
			out := c.String("out")
			q := c.String("quantize")
			if q == "" {
				if err := modelgen.Write(out, s); err != nil {
					return err
				}
			} else {
				f32 := out + ".f32.tmp"
				defer os.Remove(f32)
				if err := modelgen.Write(f32, s); err != nil {
					return err
				}
				if err := llama.Quantize(f32, out, q, 0); err != nil {
					return err
				}
			}
			fmt.Println(c.String("out"))
			return nil
		},
	})
}
