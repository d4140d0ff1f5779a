package main

import (
	"bytes"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// crossLogProbBound is how far a teacher-forced log-prob of the arm64 build
// (NEON kernels, ARMv8.2 with dot products and F16 arithmetic, run under
// QEMU) may be from this machine's on the same model, adapter and records.
// Measured with make test-arm64 on AMD EPYC Zen 4 (the native AVX-512 build
// in process), the tiny llama model, 12 completions of 6 tokens: 9.4e-7 with
// the model alone, 1.35e-6 with the arm64-trained adapter, 9.1e-7 between
// the arm64 rollout's log-probs and teacher forcing here; the bound is about
// 7 times the largest. crossAdapterBound is for the two builds' training
// steps (compared through log-probs on this build): measured 8.0e-7; Adam's
// first step moves each weight by about lr whatever its gradient's size, so
// a gradient near 0 rounded to the other sign would move it the other way:
// the bound is looser.
const (
	crossLogProbBound = 1e-5
	crossAdapterBound = 1e-4
)

// TestCrossBuild runs another build of confclip (CONFCLIP_CROSS: the command
// line that starts it, e.g. "qemu-aarch64-static -L /usr/aarch64-linux-gnu
// bin/confclip-arm64", which make test-arm64 sets): version, gen-model, a
// rollout, score, export and one training step on that build; then
// teacher-forced log-probs of the same records, with and without the adapter
// it trained, on that build and on this one (in process). It prints the
// largest difference and fails above crossLogProbBound. The adapter this
// build trains from the same training set is compared too, through the
// log-probs it gives (crossAdapterBound).
func TestCrossBuild(t *testing.T) {
	runner := strings.Fields(os.Getenv("CONFCLIP_CROSS"))
	if len(runner) == 0 {
		t.Skip("NOT RUN: CONFCLIP_CROSS is not set (make test-arm64 sets it to the arm64 build under QEMU)")
	}
	dir := t.TempDir()
	p := func(name string) string { return filepath.Join(dir, name) }
	cross := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(runner[0], append(runner[1:], args...)...)
		// Go's runtime in a second emulated process (the supervised child)
		// can hang in qemu-user's futex emulation: the arm64 build does its
		// work in the one process here. Real arm64 machines supervise as x86.
		cmd.Env = append(os.Environ(), noSuperviseEnv+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", strings.Join(runner, " "), strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	here := func(args ...string) {
		t.Helper()
		if code, out := runOut(t, args...); code != 0 {
			t.Fatalf("confclip %v: exit %d: %s", args, code, out)
		}
	}
	prompts := `{"id":"p1","prompt":"Say a letter:","answer":"x"}
{"id":"p2","prompt":"12+7=","answer":"x"}
{"id":"p3","prompt":"What is 3*4?","answer":"x"}
`
	if err := os.WriteFile(p("prompts.jsonl"), []byte(prompts), 0o644); err != nil {
		t.Fatal(err)
	}
	v := cross("version")
	t.Logf("cross build: confclip version:\n%s", v)

	cross("gen-model", "--out", p("m.gguf"))
	here("gen-model", "--out", p("m-here.gguf"))
	a, _ := os.ReadFile(p("m.gguf"))
	b, _ := os.ReadFile(p("m-here.gguf"))
	if !bytes.Equal(a, b) {
		t.Errorf("gen-model wrote different files on the two builds (%d and %d bytes): the generator is meant to be deterministic", len(a), len(b))
	}
	cross("rollout", "-m", p("m.gguf"), "--data", p("prompts.jsonl"), "--out", p("r.jsonl"), "-G", "4", "-n", "6", "-s", "1", "-t", "2")
	cross("score", "--data", p("r.jsonl"), "--out", p("s.jsonl"), "--verifier", "format", "--pattern", "[a-m]")
	cross("export", "--data", p("s.jsonl"), "--out", p("t.jsonl"))
	cross("train", "-m", p("m.gguf"), "--data", p("t.jsonl"), "--adapter-out", p("a.gguf"), "--steps", "1", "--lr", "2e-2", "-t", "2")
	cross("logprobs", "-m", p("m.gguf"), "--data", p("s.jsonl"), "--out", p("lp0-cross.jsonl"), "-t", "2")
	cross("logprobs", "-m", p("m.gguf"), "--data", p("s.jsonl"), "--out", p("lp1-cross.jsonl"), "--adapter", p("a.gguf"), "-t", "2")

	here("logprobs", "-m", p("m.gguf"), "--data", p("s.jsonl"), "--out", p("lp0.jsonl"), "-t", "2")
	here("logprobs", "-m", p("m.gguf"), "--data", p("s.jsonl"), "--out", p("lp1.jsonl"), "--adapter", p("a.gguf"), "-t", "2")
	here("train", "-m", p("m.gguf"), "--data", p("t.jsonl"), "--adapter-out", p("a-here.gguf"), "--steps", "1", "--lr", "2e-2", "-t", "2")
	here("logprobs", "-m", p("m.gguf"), "--data", p("s.jsonl"), "--out", p("lp2.jsonl"), "--adapter", p("a-here.gguf"), "-t", "2")

	largest := func(what, x, y string) float64 {
		t.Helper()
		rx, ry := readRecords(t, x), readRecords(t, y)
		if len(rx) != len(ry) || len(rx) == 0 {
			t.Fatalf("%s: %d and %d records", what, len(rx), len(ry))
		}
		worst, n := 0.0, 0
		for i := range rx {
			if len(rx[i].Logprobs) != len(ry[i].Logprobs) {
				t.Fatalf("%s: record %d has %d and %d log-probs", what, i, len(rx[i].Logprobs), len(ry[i].Logprobs))
			}
			for k := range rx[i].Logprobs {
				d := math.Abs(rx[i].Logprobs[k] - ry[i].Logprobs[k])
				if d > worst || math.IsNaN(d) {
					worst = d
				}
				n++
			}
		}
		t.Logf("largest log-prob difference, %s: %.3g over %d tokens", what, worst, n)
		return worst
	}
	for _, c := range []struct{ what, x, y string }{
		{"cross build against this one, the model", p("lp0-cross.jsonl"), p("lp0.jsonl")},
		{"cross build against this one, the model and the cross build's adapter", p("lp1-cross.jsonl"), p("lp1.jsonl")},
		{"the cross build's rollout (decoding) against this one's teacher forcing", p("s.jsonl"), p("lp0.jsonl")},
	} {
		if d := largest(c.what, c.x, c.y); d > crossLogProbBound || math.IsNaN(d) {
			t.Errorf("%s: largest log-prob difference %.3g, over %g", c.what, d, crossLogProbBound)
		}
	}
	// One step with lr 2e-2 from the same training set: the two adapters
	// differ by the rounding of the gradient (crossAdapterBound).
	if d := largest("the adapter trained here against the cross build's (both on this build)", p("lp2.jsonl"), p("lp1.jsonl")); d > crossAdapterBound || math.IsNaN(d) {
		t.Errorf("the two builds' training steps: log-probs with their adapters %.3g apart, over %g", d, crossAdapterBound)
	}
}
