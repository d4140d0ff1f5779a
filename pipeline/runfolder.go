package pipeline

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/BurntSushi/toml"
	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/metrics"
)

// runStarted reports whether a run folder holds any result: a checkpoint
// or a metrics row. A folder with only its config.toml is what a run that
// failed before its first step left; a fresh start may take it over.
func runStarted(dir string) bool {
	for _, name := range []string{CheckpointFile, metrics.JSONLFile} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return true
		}
	}
	return false
}

// runConfigDiff lists the keys whose values differ between the config a run
// folder was started with (its config.toml) and cfg, leaving out run.steps:
// a resume may run a finished run further.
func runConfigDiff(old []byte, cfg Config) ([]string, error) {
	var was Config
	if _, err := toml.Decode(string(old), &was); err != nil {
		return nil, fmt.Errorf("%s: %w", RunConfigFile, err)
	}
	was.Run.Steps = cfg.Run.Steps
	// The workers may change: seeded requests sample the same on any.
	was.Rollout.Endpoints = cfg.Rollout.Endpoints
	a, err := flatConfig(was)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", RunConfigFile, err)
	}
	b, err := flatConfig(cfg)
	if err != nil {
		return nil, err
	}
	var diff []string
	for k, v := range b {
		if a[k] != v {
			diff = append(diff, fmt.Sprintf("%s = %s in the run, %s now", k, a[k], v))
		}
	}
	sort.Strings(diff)
	return diff, nil
}

// flatConfig renders every key of a config as "table.key" -> TOML value.
func flatConfig(cfg Config) (map[string]string, error) {
	var buf bytes.Buffer
	if err := toml.NewEncoder(&buf).Encode(cfg); err != nil {
		return nil, fmt.Errorf("the configuration as TOML: %w", err)
	}
	var tree map[string]any
	if _, err := toml.Decode(buf.String(), &tree); err != nil {
		return nil, fmt.Errorf("the configuration's TOML read back: %w", err)
	}
	out := map[string]string{}
	for table, v := range tree {
		keys, ok := v.(map[string]any)
		if !ok {
			continue
		}
		for k, x := range keys {
			b, err := json.Marshal(x)
			if err != nil {
				return nil, fmt.Errorf("the configuration's %s.%s: %w", table, k, err)
			}
			out[table+"."+k] = string(b)
		}
	}
	return out, nil
}

// checkRunFiles checks, before a run folder is made, that the files the
// config names are there: a typo in a path then leaves nothing behind.
func checkRunFiles(cfg Config) error {
	check := func(key, path string) error {
		if path == "" {
			return nil
		}
		fi, err := os.Stat(path)
		if err != nil {
			return fmt.Errorf("%s = %q: %w", key, path, err)
		}
		if fi.IsDir() {
			return fmt.Errorf("%s = %q: is a folder, want a file", key, path)
		}
		return nil
	}
	return errors.Join(check("model.path", cfg.Model.Path), check("model.adapter", cfg.Model.Adapter),
		check("data.train", cfg.Data.Train), check("data.eval", cfg.Data.Eval))
}

// EvalVerdicts reads which held-out prompts the greedy evaluation of a
// run's step got right, by prompt id.
func EvalVerdicts(runDir string, step int) (map[string]bool, error) {
	path := filepath.Join(runDir, "steps", fmt.Sprintf("%04d", step), "eval", "greedy.scored.jsonl")
	recs, _, _, err := dataset.ReadFile[dataset.Scored](path, false)
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(recs))
	for _, r := range recs {
		out[r.PromptID] = r.VerifierResult.Correct
	}
	return out, nil
}
