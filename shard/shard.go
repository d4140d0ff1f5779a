// Package shard splits a batch job by a stable hash of the prompt id
// (--shard K/N, or the index from a Kubernetes Indexed Job or a Slurm array);
// package merge joins the shards' outputs.
package shard

import (
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"strconv"
	"strings"
)

// Shard is one of N parts of a batch job: shard K of N (0 <= K < N) takes
// the prompts whose id hashes to K. The zero Shard (N = 0) takes everything.
//
// A prompt's shard depends only on its id and N (FNV-1a 64 of the id, mod N),
// so adding prompts to a file does not move the others, and since every
// sequence's random stream depends only on (seed, prompt id, sample), the N
// shards' records together are those of one process.
type Shard struct {
	K int `json:"k"`
	N int `json:"n"`
}

// Environment variables a shard index is read from when only the count is
// given: Kubernetes Indexed Jobs set the first, Slurm job arrays the others.
const (
	EnvJobCompletionIndex = "JOB_COMPLETION_INDEX"
	EnvSlurmTaskID        = "SLURM_ARRAY_TASK_ID"
	EnvSlurmTaskMin       = "SLURM_ARRAY_TASK_MIN"
	EnvSlurmTaskCount     = "SLURM_ARRAY_TASK_COUNT"
)

// Enabled reports whether the shard takes part of the work only.
func (s Shard) Enabled() bool { return s.N > 1 }

// String is "K/N", or "" for the whole job.
func (s Shard) String() string {
	if s.N == 0 {
		return ""
	}
	return fmt.Sprintf("%d/%d", s.K, s.N)
}

// Has reports whether the record with this id belongs to the shard.
func (s Shard) Has(id string) bool {
	if s.N <= 1 {
		return true
	}
	return Of(id, s.N) == s.K
}

// Of is the shard (0..n-1) a prompt id belongs to among n.
func Of(id string, n int) int {
	h := fnv.New64a()
	h.Write([]byte(id))
	return int(h.Sum64() % uint64(n))
}

// Check reports a shard that cannot be.
func (s Shard) Check() error {
	if s.N == 0 && s.K == 0 {
		return nil
	}
	if s.N < 1 || s.K < 0 || s.K >= s.N {
		return fmt.Errorf("shard %d/%d: want K/N with N >= 1 and 0 <= K < N", s.K, s.N)
	}
	return nil
}

// Parse reads "K/N" (shard K of N, counted from 0).
func Parse(spec string) (Shard, error) {
	k, n, ok := strings.Cut(strings.TrimSpace(spec), "/")
	if !ok {
		return Shard{}, fmt.Errorf("shard %q: want K/N, e.g. 0/8 for the first of 8 shards", spec)
	}
	ki, err1 := strconv.Atoi(strings.TrimSpace(k))
	ni, err2 := strconv.Atoi(strings.TrimSpace(n))
	if err1 != nil || err2 != nil {
		return Shard{}, fmt.Errorf("shard %q: want K/N with whole numbers, e.g. 0/8", spec)
	}
	s := Shard{K: ki, N: ni}
	return s, s.Check()
}

// Resolve is the shard a process of a batch job takes: spec "K/N" when
// given; else, with count N > 0, K from JOB_COMPLETION_INDEX (a Kubernetes
// Indexed Job) or SLURM_ARRAY_TASK_ID (less SLURM_ARRAY_TASK_MIN, so that
// --array=1-8 works too); spec "env" takes both K and N from Slurm's
// variables. getenv is os.Getenv when nil. Neither given: the whole job.
func Resolve(spec string, count int, getenv func(string) string) (Shard, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	switch {
	case spec != "" && spec != "env" && count > 0:
		return Shard{}, errors.New("give the shard as K/N or the shard count, not both")
	case spec != "" && spec != "env":
		return Parse(spec)
	case count < 0:
		return Shard{}, fmt.Errorf("shard count %d: want >= 1", count)
	case spec == "" && count == 0:
		return Shard{}, nil
	}
	if count == 0 { // spec "env"
		v := getenv(EnvSlurmTaskCount)
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return Shard{}, fmt.Errorf("shard env: %s is %q, want the number of array tasks (or give --shard-count N)", EnvSlurmTaskCount, v)
		}
		count = n
	}
	k, err := envIndex(getenv)
	if err != nil {
		return Shard{}, err
	}
	s := Shard{K: k, N: count}
	if err := s.Check(); err != nil {
		return Shard{}, fmt.Errorf("%w (index from the environment, count %d)", err, count)
	}
	return s, nil
}

// envIndex is the task index a cluster's scheduler gives this process.
func envIndex(getenv func(string) string) (int, error) {
	if v := getenv(EnvJobCompletionIndex); v != "" {
		k, err := strconv.Atoi(v)
		if err != nil {
			return 0, fmt.Errorf("%s=%q: not a whole number", EnvJobCompletionIndex, v)
		}
		return k, nil
	}
	if v := getenv(EnvSlurmTaskID); v != "" {
		k, err := strconv.Atoi(v)
		if err != nil {
			return 0, fmt.Errorf("%s=%q: not a whole number", EnvSlurmTaskID, v)
		}
		if m := getenv(EnvSlurmTaskMin); m != "" {
			lo, err := strconv.Atoi(m)
			if err != nil {
				return 0, fmt.Errorf("%s=%q: not a whole number", EnvSlurmTaskMin, m)
			}
			k -= lo
		}
		return k, nil
	}
	return 0, fmt.Errorf("a shard count was given but neither %s (Kubernetes Indexed Job) nor %s (Slurm array) is set: give --shard K/N",
		EnvJobCompletionIndex, EnvSlurmTaskID)
}

// Key is what a record is sharded by: its prompt id, or its line for
// a record without one (the same file then shards the same way).
func Key(id string, line int) string {
	if id != "" {
		return id
	}
	return "#" + strconv.Itoa(line)
}

// Filter returns the elements of xs whose id (by id) is in the shard.
func Filter[T any](s Shard, xs []T, id func(*T) string) []T {
	if !s.Enabled() {
		return xs
	}
	out := xs[:0:0]
	for i := range xs {
		if s.Has(id(&xs[i])) {
			out = append(out, xs[i])
		}
	}
	return out
}
