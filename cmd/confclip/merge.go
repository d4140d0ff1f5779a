package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/confclip/confclip/internal/atomicfile"
	"github.com/confclip/confclip/internal/english"
	"github.com/confclip/confclip/merge"
	"github.com/confclip/confclip/reporting"
	"github.com/confclip/confclip/shard"
	"github.com/urfave/cli/v3"
)

// shardFlags are --shard and --shard-count, on every command that a batch
// job can split (docs/scale.md).
func shardFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "shard", Usage: "take shard `K/N` of the prompts (by a hash of their id; K from 0), or \"env\" for Slurm's SLURM_ARRAY_TASK_ID and SLURM_ARRAY_TASK_COUNT"},
		&cli.IntFlag{Name: "shard-count", Usage: "`N` shards, K read from JOB_COMPLETION_INDEX (Kubernetes Indexed Job) or SLURM_ARRAY_TASK_ID"},
	}
}

// shardOf is the shard the flags (and the environment) give.
func shardOf(c *cli.Command) (shard.Shard, error) {
	s, err := shard.Resolve(c.String("shard"), c.Int("shard-count"), nil)
	if err != nil {
		return s, cli.Exit(fmt.Sprintf("%s: %v", c.FullName(), err), 2)
	}
	return s, nil
}

func init() {
	register(func() *cli.Command {
		return &cli.Command{
			Name:  "merge",
			Usage: "join the outputs of a sharded job (rollouts, scores or evaluations), checking that they add up",
			UsageText: "confclip merge rollouts --out rollouts.jsonl shard-*.jsonl\n" +
				"confclip merge scores --out scored.jsonl --summary summary.json summary-*.json\n" +
				"confclip merge eval --out eval.json eval-*.json",
			Description: "Every shard 0..N-1 must be there once, made with the same model, adapter and options\n" +
				"(rollout files' provenance), or scored and evaluated the same way. Summaries are computed\n" +
				"again from the records, as one process would, not averaged.",
			Commands: []*cli.Command{
				{
					Name: "rollouts", Usage: "join rollout files (each with its .provenance.json)", ArgsUsage: "FILE...",
					Flags:  []cli.Flag{&cli.StringFlag{Name: "out", Aliases: []string{"o"}, Required: true, Usage: "merged rollout `FILE`"}},
					Action: mergeRolloutsCmd,
				},
				{
					Name: "scores", Usage: "join scored files, given by their summaries (score --summary)", ArgsUsage: "SUMMARY...",
					Flags: []cli.Flag{
						&cli.StringFlag{Name: "out", Aliases: []string{"o"}, Required: true, Usage: "merged scored records `FILE`"},
						&cli.StringFlag{Name: "summary", Usage: "write the merged summary as JSON to `FILE`"},
					},
					Action: mergeScoresCmd,
				},
				{
					Name: "eval", Usage: "join evaluation results (eval --json)", ArgsUsage: "RESULT...",
					Flags:  []cli.Flag{&cli.StringFlag{Name: "out", Aliases: []string{"o"}, Usage: "write the merged result as JSON to `FILE` (else it is printed)"}},
					Action: mergeEvalCmd,
				},
			},
		}
	})
}

func mergeRolloutsCmd(ctx context.Context, c *cli.Command) error {
	res, err := merge.Rollouts(c.Args().Slice(), c.String("out"))
	if err != nil {
		return err
	}
	fmt.Fprintf(c.Root().Writer, "%s merged into %s: %s, %s\n", english.Count(res.Shards, "shard"), res.Out, english.Count(res.Groups, "group"), english.Count(res.Records, "record"))
	return nil
}

func mergeScoresCmd(ctx context.Context, c *cli.Command) error {
	res, err := merge.Scores(c.Args().Slice(), c.String("out"))
	if err != nil {
		return err
	}
	fmt.Fprintf(c.Root().Writer, "%s merged into %s: %s, %s\n", english.Count(res.Shards, "shard"), res.Out, english.Count(res.Groups, "group"), english.Count(res.Records, "record"))
	if err := reporting.ScoreTable(c.Root().Writer, res.Summary); err != nil {
		return err
	}
	if p := c.String("summary"); p != "" {
		return atomicfile.WriteJSON(p, res.Summary)
	}
	return nil
}

func mergeEvalCmd(ctx context.Context, c *cli.Command) error {
	res, err := merge.Eval(c.Args().Slice())
	if err != nil {
		return err
	}
	if p := c.String("out"); p != "" {
		if err := atomicfile.WriteJSON(p, res); err != nil {
			return err
		}
	} else {
		b, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			return err
		}
		fmt.Fprintln(c.Root().Writer, string(b))
	}
	fmt.Fprintf(os.Stderr, "%s: %d correct (accuracy %.4f), %d failed\n", english.Count(res.Prompts, "prompt"), res.Correct, res.Accuracy, res.Failed)
	return nil
}
