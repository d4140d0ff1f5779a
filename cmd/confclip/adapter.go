package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/confclip/confclip/pipeline"
)

func init() {
	register(func() *cli.Command {
		return &cli.Command{
			Name:  "adapter",
			Usage: "convert LoRA adapters between llama.cpp's GGUF and PEFT (adapter_model.safetensors + adapter_config.json)",
			Commands: []*cli.Command{{
				Name:      "export",
				Usage:     "write a GGUF LoRA adapter as a PEFT adapter folder, for PEFT, transformers and vLLM",
				UsageText: "confclip adapter export --model M.gguf --adapter A.gguf --peft DIR",
				Flags: join(modelFlags(), []cli.Flag{
					&cli.StringFlag{Name: "peft", Required: true, Usage: "PEFT adapter `DIR` to write"},
					&cli.StringFlag{Name: "base-model", Usage: "base_model_name_or_path of adapter_config.json: the Hugging Face `NAME` (or folder) of the model (default: from the GGUF's general.source.huggingface.repository or general.basename fields)"},
				}),
				Action: func(ctx context.Context, c *cli.Command) error {
					cfg, err := loadConfig(c)
					if err != nil {
						return err
					}
					sum, err := pipeline.ExportPEFT(cfg.Model, cfg.Model.Adapter, c.String("peft"), c.String("base-model"))
					if err != nil {
						return err
					}
					printPEFT(c, "wrote "+c.String("peft"), sum)
					return nil
				},
			}, {
				Name:      "import",
				Usage:     "write a PEFT LoRA adapter folder as a GGUF LoRA adapter for the model",
				UsageText: "confclip adapter import --model M.gguf --peft DIR --out A.gguf",
				Flags: join(modelFlags(), []cli.Flag{
					&cli.StringFlag{Name: "peft", Required: true, Usage: "PEFT adapter `DIR` to read"},
					&cli.StringFlag{Name: "out", Aliases: []string{"o"}, Required: true, Usage: "GGUF LoRA adapter `FILE` to write"},
				}),
				Action: func(ctx context.Context, c *cli.Command) error {
					cfg, err := loadConfig(c)
					if err != nil {
						return err
					}
					sum, err := pipeline.ImportPEFT(cfg.Model, c.String("peft"), c.String("out"))
					if err != nil {
						return err
					}
					printPEFT(c, "wrote "+c.String("out"), sum)
					return nil
				},
			}},
		}
	})
}

func printPEFT(c *cli.Command, what string, s pipeline.PEFTSummary) {
	fmt.Fprintf(c.Root().Writer, "%s: %d LoRA matrices (%s), r = %d, alpha = %g, modules %s\n",
		what, s.Tensors, s.Arch, s.Rank, s.Alpha, strings.Join(s.Targets, ", "))
}
