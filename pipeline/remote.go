package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/internal/atomicfile"
	"github.com/confclip/confclip/rollout"
)

// RemoteRollouts are rollout workers for `run` ([rollout] endpoints):
// OpenAI-compatible servers that sample each step's groups in place of the
// local engine. server.Pool is the implementation; pipeline cannot build
// one itself (package server imports this one), so the caller passes it in
// RunOptions.Remote.
type RemoteRollouts interface {
	RolloutSource
	// SetAdapter puts the adapter file (whose sha256 is given) on every
	// worker that takes uploads (confclip serve with --adapter-dir), and
	// makes the next Generate refuse any worker that reports another.
	SetAdapter(ctx context.Context, path, sha256 string) error
	// Report says how the last SetAdapter and Generate went, worker by
	// worker.
	Report() RemoteReport
}

// RemoteReport is a step's rollouts on remote workers; `run` writes it as
// steps/NNNN/workers.json.
type RemoteReport struct {
	// AdapterSHA256 is the adapter the step's groups were sampled with.
	AdapterSHA256 string `json:"adapter_sha256"`
	Groups        int    `json:"groups"`
	// Retries counts groups sent again to another worker after a failure
	// or a timeout.
	Retries int            `json:"retries"`
	Workers []WorkerReport `json:"workers"`
}

// WorkerReport is one worker's part of a step.
type WorkerReport struct {
	Endpoint string `json:"endpoint"`
	// Uploads is true for a worker that takes adapters (confclip serve
	// with --adapter-dir); false for any other OpenAI-compatible server,
	// which samples with whatever it serves.
	Uploads bool `json:"uploads"`
	// AdapterSHA256 is the adapter the worker last reported (GET /health).
	AdapterSHA256 string `json:"adapter_sha256,omitempty"`
	Groups        int    `json:"groups"`   // groups it generated
	Failures      int    `json:"failures"` // requests that failed or timed out (their groups went elsewhere)
	// Refused says why the worker was left out (down, another adapter);
	// "" when it was used to the end.
	Refused string `json:"refused,omitempty"`
}

// WorkersFile is a step folder's report of its remote workers.
const WorkersFile = "workers.json"

// remoteStep samples a step's groups on the workers into rolls. The adapter
// the step samples with (the state after the previous step) goes to every
// worker first. The records keep the workers' log-probs; a record that came
// without its prompt's tokens gets them from the local tokenizer (e), and
// one without log-probs is teacher-forced locally at scoring time
// (metrics.Step.TeacherForced counts those).
func remoteStep(ctx context.Context, cfg Config, rem RemoteRollouts, e *rollout.Engine, step int, batch []dataset.Prompt, rolls, adapter string) (rollout.Stats, error) {
	sum, err := dataset.FileSHA256(adapter)
	if err != nil {
		return rollout.Stats{}, err
	}
	err = rem.SetAdapter(ctx, adapter, sum)
	if err == nil {
		c := cfg
		c.Rollout.Seed = stepSeed(cfg, step) // as the local engine's SetSeed
		var st rollout.Stats
		gen := func(ctx context.Context, ps []dataset.Prompt, emit func([]dataset.Rollout) error) (rollout.Stats, error) {
			return rem.Generate(ctx, c, ps, emit)
		}
		st, err = writeStepRollouts(ctx, gen, e, batch, rolls)
		if werr := atomicfile.WriteJSON(filepath.Join(filepath.Dir(rolls), WorkersFile), rem.Report()); err == nil {
			err = werr
		}
		return st, err
	}
	if werr := atomicfile.WriteJSON(filepath.Join(filepath.Dir(rolls), WorkersFile), rem.Report()); werr != nil {
		err = fmt.Errorf("%w (and writing %s: %v)", err, WorkersFile, werr)
	}
	return rollout.Stats{}, err
}

// stepSeed is the seed of a step's sampling: every step samples afresh.
func stepSeed(cfg Config, step int) uint64 { return cfg.Rollout.Seed + uint64(step)*1_000_003 }

// writeStepRollouts writes a step's groups in the order of its prompts,
// whatever order they come in (the local engine's, or the order in which
// the workers finish them), so that scoring and training see the same batch
// in the same order either way: a run on workers trains the adapter a local
// run trains, to the last bit, when the samples are the same. Records
// without their prompt's tokens get them from e's tokenizer.
func writeStepRollouts(ctx context.Context, generate func(context.Context, []dataset.Prompt, func([]dataset.Rollout) error) (rollout.Stats, error),
	e *rollout.Engine, batch []dataset.Prompt, path string) (rollout.Stats, error) {
	index := make(map[string]int, len(batch))
	for i, p := range batch {
		index[p.ID] = i
	}
	groups := make([][]dataset.Rollout, len(batch))
	st, err := generate(ctx, batch, func(g []dataset.Rollout) error {
		i, ok := index[g[0].PromptID]
		if !ok {
			return fmt.Errorf("a worker answered for prompt %q, which the step did not send", g[0].PromptID)
		}
		var toks []int32
		for k := range g {
			if len(g[k].PromptTokens) > 0 || len(g[k].Tokens) == 0 {
				continue
			}
			if toks == nil {
				var err error
				if toks, err = e.PromptTokens(&batch[i]); err != nil {
					return fmt.Errorf("prompt %q: %w", g[0].PromptID, err)
				}
			}
			g[k].PromptTokens = toks
		}
		groups[i] = g
		return nil
	})
	if err != nil {
		return st, err
	}
	w, err := dataset.Create(path)
	if err != nil {
		return st, err
	}
	for _, g := range groups {
		for k := range g {
			if err := w.Write(&g[k]); err != nil {
				w.Abort()
				return st, err
			}
		}
	}
	return st, w.Commit()
}

// finishRemote puts the run's last adapter on the workers, so that they
// serve the trained policy when the run is done.
func finishRemote(ctx context.Context, rem RemoteRollouts, dir string) error {
	b, err := readCheckpoint(dir)
	if err != nil {
		return err
	}
	path := filepath.Join(dir, b.Dir, b.Adapter)
	sum, err := dataset.FileSHA256(path)
	if err != nil {
		return err
	}
	if err := rem.SetAdapter(ctx, path, sum); err != nil {
		return fmt.Errorf("putting the last adapter on the workers: %w", err)
	}
	return nil
}

func readCheckpoint(dir string) (Checkpoint, error) {
	var ck Checkpoint
	b, err := os.ReadFile(filepath.Join(dir, CheckpointFile))
	if err != nil {
		return ck, err
	}
	if err := json.Unmarshal(b, &ck); err != nil {
		return ck, fmt.Errorf("%s: %w", filepath.Join(dir, CheckpointFile), err)
	}
	if ck.Dir == "" || ck.Adapter == "" {
		return ck, errors.New(filepath.Join(dir, CheckpointFile) + ": names no adapter")
	}
	return ck, nil
}

// checkRemote refuses [rollout] endpoints without the workers to use them.
func checkRemote(cfg Config, rem RemoteRollouts) error {
	if len(cfg.Rollout.Endpoints) > 0 && rem == nil {
		return errors.New("rollout.endpoints is set but no workers were given (RunOptions.Remote; confclip run makes them from the endpoints)")
	}
	if slices.Contains(cfg.Rollout.Endpoints, "") {
		return errors.New("rollout.endpoints: an empty URL")
	}
	return nil
}

// remoteRun is what a step needs to sample remotely: the workers, and the
// local model that teacher-forces records sent without log-probs.
type remoteRun struct {
	src RemoteRollouts
	m   *Model
}

// report is the step's retries and the workers that sampled a group.
func (r *remoteRun) report() (retries, workers int) {
	rep := r.src.Report()
	for _, w := range rep.Workers {
		if w.Groups > 0 {
			workers++
		}
	}
	return rep.Retries, workers
}

func remoteOf(rem RemoteRollouts, m *Model) *remoteRun {
	if rem == nil {
		return nil
	}
	return &remoteRun{src: rem, m: m}
}
