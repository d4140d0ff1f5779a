package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"

	"github.com/urfave/cli/v3"

	"github.com/confclip/confclip/internal/english"
	"github.com/confclip/confclip/verify"
)

func init() {
	register(func() *cli.Command {
		return &cli.Command{
			Name:  "verify",
			Usage: "check completions against reference answers with a verifier (no model needed)",
			UsageText: "confclip verify --verifier math --answer REF --completion TEXT\n" +
				"confclip verify --verifier math --data cases.jsonl --out results.jsonl",
			Description: "With --answer and --completion, prints one result as JSON. With --data, reads JSON lines\n" +
				"with \"answer\" and \"completion\" and writes one result a line, in order, to --out (atomically)\n" +
				"or to standard output. Results have correct, score, extracted, answer_span and reason.",
			Flags: join(verifierFlags(), []cli.Flag{
				&cli.StringFlag{Name: "answer", Usage: "the reference answer"},
				&cli.StringFlag{Name: "completion", Usage: "the completion to check"},
				&cli.StringFlag{Name: "data", Usage: "JSONL `FILE` of {\"answer\", \"completion\"} lines"},
				&cli.StringFlag{Name: "out", Aliases: []string{"o"}, Usage: "results `FILE` (JSONL) for --data; standard output when absent"},
				&cli.IntFlag{Name: "jobs", Aliases: []string{"j"}, Value: runtime.NumCPU(), Usage: "verifications run in parallel with --data"},
			}, shardFlags()),
			Action: verifyCmd,
		}
	})
}

func verifyCmd(ctx context.Context, c *cli.Command) error {
	cfg, err := loadConfig(c)
	if err != nil {
		return err
	}
	w := c.Root().Writer
	single := c.IsSet("answer") || c.IsSet("completion")
	switch {
	case single && c.IsSet("data"):
		return errors.New("give either --answer and --completion, or --data")
	case single:
		if !c.IsSet("answer") || !c.IsSet("completion") {
			return errors.New("--answer and --completion go together")
		}
		res, err := verify.One(ctx, cfg.Verifier, c.String("completion"), c.String("answer"))
		if err != nil {
			return err
		}
		return json.NewEncoder(w).Encode(res)
	case c.IsSet("data"):
		shard, err := shardOf(c)
		if err != nil {
			return err
		}
		sum, err := verify.File(ctx, verify.FileOptions{
			Verifier: cfg.Verifier, In: c.String("data"), Out: c.String("out"), W: w, Jobs: c.Int("jobs"),
			Shard: shard,
		})
		if err != nil {
			return err
		}
		if sum.Records == 0 { // a shard may hold none
			fmt.Fprintf(os.Stderr, "verified 0 completions: shard %s holds none\n", shard)
			return nil
		}
		fmt.Fprintf(os.Stderr, "verified %s: %d correct (%.1f%%)\n", english.Count(sum.Records, "completion"), sum.Correct, 100*float64(sum.Correct)/float64(sum.Records))
		return nil
	}
	return errors.New("nothing to verify: give --answer and --completion, or --data")
}
