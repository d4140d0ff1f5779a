package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/scoring"
	"github.com/confclip/confclip/tools"
)

// scaleFixture writes the tiny model and 12 prompts into a temporary folder
// and makes it the working folder.
func scaleFixture(t *testing.T) {
	t.Helper()
	dir := t.TempDir()
	t.Chdir(dir)
	if err := tools.GenModel(tools.GenModelOptions{Out: "M.gguf"}); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for i := range 12 {
		fmt.Fprintf(&b, `{"id":"p%d","prompt":"Say %d:","answer":"%d"}`+"\n", i, i, i)
	}
	if err := os.WriteFile("prompts.jsonl", []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestShardFlagsAndMerge: shard 0 by --shard, shard 1 by --shard-count and
// JOB_COMPLETION_INDEX, score with --shard env under Slurm's variables,
// then merge; a missing shard and a bad spec are refused.
func TestShardFlagsAndMerge(t *testing.T) {
	scaleFixture(t)
	common := []string{"-m", "M.gguf", "--data", "prompts.jsonl", "-G", "2", "-n", "4", "--ctx-size", "64", "--no-timing"}
	if code, out := runOut(t, append([]string{"rollout", "--out", "r0.jsonl", "--shard", "0/2"}, common...)...); code != 0 {
		t.Fatalf("rollout --shard 0/2: exit %d\n%s", code, out)
	}
	t.Setenv("JOB_COMPLETION_INDEX", "1")
	if code, out := runOut(t, append([]string{"rollout", "--out", "r1.jsonl", "--shard-count", "2"}, common...)...); code != 0 {
		t.Fatalf("rollout --shard-count 2: exit %d\n%s", code, out)
	}
	if code, out := runOut(t, "merge", "rollouts", "--out", "r.jsonl", "r0.jsonl"); code == 0 || !strings.Contains(out, "shard 1/2 missing") {
		t.Fatalf("merge without shard 1: exit %d\n%s", code, out)
	}
	code, out := runOut(t, "merge", "rollouts", "--out", "r.jsonl", "r1.jsonl", "r0.jsonl")
	if code != 0 || !strings.Contains(out, "2 shards merged into r.jsonl: 12 groups, 24 records") {
		t.Fatalf("merge: exit %d\n%s", code, out)
	}
	t.Setenv("JOB_COMPLETION_INDEX", "")
	for k := range 2 {
		t.Setenv("SLURM_ARRAY_TASK_ID", fmt.Sprint(k+1))
		t.Setenv("SLURM_ARRAY_TASK_MIN", "1")
		t.Setenv("SLURM_ARRAY_TASK_COUNT", "2")
		if code, out := runOut(t, "score", "--data", fmt.Sprintf("r%d.jsonl", k), "--out", fmt.Sprintf("s%d.jsonl", k), "--summary", fmt.Sprintf("s%d.json", k),
			"--verifier", "format", "--pattern", "[0-9]", "--reward", "binary", "--shard", "env"); code != 0 {
			t.Fatalf("score shard %d: exit %d\n%s", k, code, out)
		}
	}
	if code, out := runOut(t, "merge", "scores", "--out", "s.jsonl", "--summary", "s.json", "s0.json", "s1.json"); code != 0 {
		t.Fatalf("merge scores: exit %d\n%s", code, out)
	}
	var sum scoring.Summary
	b, _ := os.ReadFile("s.json")
	if err := json.Unmarshal(b, &sum); err != nil || sum.Groups != 12 || sum.Records != 24 {
		t.Fatalf("merged summary %s: %v", b, err)
	}
	if code, out := runOut(t, append([]string{"rollout", "--out", "x.jsonl", "--shard", "2/2"}, common...)...); code != 2 || !strings.Contains(out, "0 <= K < N") {
		t.Fatalf("--shard 2/2: exit %d\n%s", code, out)
	}
}

// TestServeAndEndpoint: confclip serve on 127.0.0.1 (port 0) answers
// /health; rollout --endpoint against it writes every group; SIGTERM's
// stand-in (the context) stops it cleanly.
func TestServeAndEndpoint(t *testing.T) {
	scaleFixture(t)
	pr, pw := io.Pipe()
	app := newApp()
	app.Writer, app.ErrWriter = pw, pw
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- app.Run(ctx, []string{"confclip", "serve", "-m", "M.gguf", "--port", "0", "--ctx-size", "64", "--parallel", "8"})
		pw.Close()
	}()
	sc := bufio.NewScanner(pr)
	var url string
	for sc.Scan() {
		if _, u, ok := strings.Cut(sc.Text(), " on "); ok && strings.HasPrefix(sc.Text(), "serving ") {
			url = u
			break
		}
	}
	var log syncBuffer // the access log
	go io.Copy(&log, pr)
	if url == "" {
		cancel()
		t.Fatalf("serve printed no address: %v", <-done)
	}
	resp, err := http.Get(strings.TrimSuffix(url, "/v1") + "/health")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("health: %v %v", resp, err)
	}
	resp.Body.Close()

	code, out := runOut(t, "rollout", "--endpoint", url, "--data", "prompts.jsonl", "--out", "remote.jsonl", "-G", "3", "-n", "4", "--seed", "2")
	if code != 0 || !strings.Contains(out, "12 groups (36 completions") {
		t.Fatalf("rollout --endpoint: exit %d\n%s", code, out)
	}
	recs, _, _, err := dataset.ReadFile[dataset.Rollout](filepath.Join(".", "remote.jsonl"), false)
	if err != nil || len(recs) != 36 {
		t.Fatalf("%d records, %v", len(recs), err)
	}
	for _, r := range recs {
		if len(r.Tokens) == 0 || len(r.Logprobs) != len(r.Tokens) || r.Answer == "" {
			t.Fatalf("record %s/%d: %d tokens, %d log-probs, answer %q", r.PromptID, r.Sample, len(r.Tokens), len(r.Logprobs), r.Answer)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop")
	}
	// One access-log line per request: 1 health check, 12 groups' requests.
	l := log.String()
	if !regexp.MustCompile(`(?m) GET /health 200 \d+B \d`).MatchString(l) || strings.Count(l, " POST /v1/completions 200 ") != 12 {
		t.Errorf("access log:\n%s", l)
	}
}

// TestOutputPlurals: one prompt, one completion of one token, one shard:
// rollout, score, export and merge say "1 group", "1 record", "1 token",
// "1 shard" (they said "1 groups", "1 records").
func TestOutputPlurals(t *testing.T) {
	scaleFixture(t)
	if err := os.WriteFile("one.jsonl", []byte(`{"id":"p0","prompt":"Say 0:","answer":"0"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A count of 1, not the end of a number ("409.1 tokens/s").
	oneS := regexp.MustCompile(`(?:^|[^0-9.])1 [a-z-]+( [a-z-]+)?s\b`)
	var all strings.Builder
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"rollout", "-m", "M.gguf", "--data", "one.jsonl", "--out", "r.jsonl", "-G", "1", "-n", "1", "--ctx-size", "64", "--no-timing", "--shard", "0/1"},
			[]string{"1 group (1 completion, 1 token)", "1 complete group"}},
		{[]string{"score", "--data", "r.jsonl", "--out", "s.jsonl", "--summary", "s.json", "--verifier", "format", "--pattern", ".", "--reward", "binary", "--shard", "0/1"},
			[]string{"scored 1 record in 1 group"}},
		{[]string{"export", "--data", "s.jsonl", "--out", "x.jsonl"}, []string{"wrote 1 example (1 completion token) from 1 record"}},
		{[]string{"merge", "rollouts", "--out", "m.jsonl", "r.jsonl"}, []string{"1 shard merged into m.jsonl: 1 group, 1 record"}},
		{[]string{"merge", "scores", "--out", "ms.jsonl", "--summary", "ms.json", "s.json"}, []string{"1 shard merged into ms.jsonl: 1 group, 1 record", "scored 1 record in 1 group"}},
	} {
		code, out := runOut(t, c.args...)
		if code != 0 {
			t.Fatalf("%v: exit %d\n%s", c.args, code, out)
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("%v: no %q in\n%s", c.args, w, out)
			}
		}
		all.WriteString(out)
	}
	if m := oneS.FindAllString(all.String(), -1); len(m) > 0 {
		t.Errorf("plurals after 1: %q in\n%s", m, all.String())
	}
}
