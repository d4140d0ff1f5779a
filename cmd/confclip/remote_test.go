package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/metrics"
	"github.com/confclip/confclip/pipeline"
	"github.com/confclip/confclip/server"
	"github.com/confclip/confclip/tools"
)

// worker is a `confclip serve` process.
type worker struct {
	cmd  *exec.Cmd
	url  string // http://127.0.0.1:PORT/v1
	args []string
	out  *syncBuffer
}

// startWorker starts `confclip serve ARGS` and waits for its address.
func startWorker(t *testing.T, args ...string) *worker {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	w := &worker{args: args, out: &syncBuffer{}}
	w.cmd = exec.Command(exe, append([]string{"serve"}, args...)...)
	w.cmd.Env = append(os.Environ(), asMainEnv+"=1")
	w.cmd.Stderr = w.out
	stdout, err := w.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.cmd.Process.Kill(); w.cmd.Wait() })
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if _, u, ok := strings.Cut(sc.Text(), " on "); ok && strings.HasPrefix(sc.Text(), "serving ") {
				lines <- u
			}
		}
		close(lines)
	}()
	select {
	case u, ok := <-lines:
		if !ok {
			t.Fatalf("serve %v printed no address:\n%s", args, w.out)
		}
		w.url = u
	case <-time.After(60 * time.Second):
		t.Fatalf("serve %v did not start:\n%s", args, w.out)
	}
	return w
}

func getHealth(u string) (map[string]any, error) {
	resp, err := http.Get(strings.TrimSuffix(u, "/v1") + "/health")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var h map[string]any
	return h, json.NewDecoder(resp.Body).Decode(&h)
}

// TestRunOnRemoteWorkers: `run` with two `confclip serve` workers on
// 127.0.0.1 for 3 steps. Worker B serves one sequence at a time, so its
// queue grows; in step 2 it is killed (SIGKILL) while it holds requests,
// and a second later started again on the same port, without the step's
// adapter; step 3 waits for it. Checked:
// every step's records are all there (every group, every sample) and each
// names one of the two workers; B's groups of step 2 went to A (retries
// counted in workers.json and the metrics); step 3 gave B the adapter
// again and groups; steps 1 and 3 used both
// workers; both end on the run's last adapter (its sha256 in /health); the
// metrics have every step with its workers, retries and log-prob source.
func TestRunOnRemoteWorkers(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "M.gguf")
	if err := tools.GenModel(tools.GenModelOptions{Out: model}); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for i := range 8 {
		fmt.Fprintf(&b, `{"id":"p%d","prompt":"Say %d:","answer":"x"}`+"\n", i, i)
	}
	prompts := filepath.Join(dir, "prompts.jsonl")
	if err := os.WriteFile(prompts, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := pipeline.DefaultConfig()
	cfg.Model.Path = model
	cfg.Model.Ctx = 128
	cfg.Data.Train = prompts
	cfg.Verifier.Name = "format"
	cfg.Verifier.Pattern = `^\s*[a-m]`
	cfg.Rollout.Group = 4
	cfg.Rollout.MaxTokens = 24
	cfg.Train.LR = 2e-2
	cfg.Train.MicroBatch = 256
	cfg.Train.LoraRank = 4
	cfg.Run.Steps = 3
	cfg.Run.PromptsPerStep = 8
	cfg.Run.Out = filepath.Join(dir, "run")

	dirA, dirB := filepath.Join(dir, "adapters-a"), filepath.Join(dir, "adapters-b")
	for _, d := range []string{dirA, dirB} {
		os.MkdirAll(d, 0o755)
	}
	common := []string{"-m", model, "--host", "127.0.0.1", "--ctx-size", "128", "--threads", "1"}
	a := startWorker(t, append(common, "--port", "0", "--parallel", "8", "--adapter-dir", dirA)...)
	wb := startWorker(t, append(common, "--port", "0", "--parallel", "1", "--adapter-dir", dirB)...)
	pu, err := url.Parse(wb.url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Rollout.Endpoints = []string{a.url, wb.url}

	pool := server.NewPool(cfg.Rollout.Endpoints, server.Client{Concurrency: 8})
	pool.Poll = 50 * time.Millisecond
	pool.Timeout = 2 * time.Minute
	var logBuf syncBuffer
	pool.Log = &logBuf

	// The kill: once step 2's requests reach B.
	var killed, restarted sync.WaitGroup
	killed.Add(1)
	restarted.Add(1)
	var busyAtKill float64
	var restartedB *worker
	var killOnce sync.Once
	killB := func() {
		defer restarted.Done()
		deadline := time.Now().Add(60 * time.Second)
		for time.Now().Before(deadline) {
			h, err := getHealth(wb.url)
			if err == nil && h["queued"].(float64)+h["running"].(float64) > 0 {
				busyAtKill = h["queued"].(float64) + h["running"].(float64)
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
		wb.cmd.Process.Kill()
		wb.cmd.Wait()
		killed.Done()
		// Down for longer than a request's own retry pause (250 ms): B's
		// requests fail, not reach the new process.
		time.Sleep(time.Second)
		args := append(append([]string{}, common...), "--port", pu.Port(), "--parallel", "1", "--adapter-dir", dirB)
		restartedB = startWorker(t, args...)
	}
	progress := func(e pipeline.Event) {
		if st, ok := e.(pipeline.RunStage); ok && st.Step == 2 && st.Stage == "rollout" {
			killOnce.Do(func() { go killB() })
		}
		if st, ok := e.(pipeline.RunStage); ok && st.Step == 3 && st.Stage == "rollout" {
			restarted.Wait() // B is back (without the adapter) before step 3
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	res, err := pipeline.Run(ctx, pipeline.RunOptions{Config: cfg, Remote: pool, Progress: progress})
	restarted.Wait()
	if err != nil {
		t.Fatalf("run: %v\nworkers' log:\n%s\nB:\n%s", err, logBuf.String(), wb.out)
	}
	if busyAtKill == 0 {
		t.Fatal("B never held a request of step 2 before the kill")
	}
	t.Logf("B killed holding %v requests; pool log:\n%s", busyAtKill, logBuf.String())

	base := map[string]string{a.url: "A", wb.url: "B"}
	reports := make([]pipeline.RemoteReport, 4)
	for step := 1; step <= 3; step++ {
		sdir := filepath.Join(cfg.Run.Out, "steps", fmt.Sprintf("%04d", step))
		recs, _, _, err := dataset.ReadFile[dataset.Rollout](filepath.Join(sdir, "rollouts.jsonl"), false)
		if err != nil {
			t.Fatal(err)
		}
		samples := map[string]map[int]bool{}
		byWorker := map[string]map[string]bool{}
		for _, r := range recs {
			name, ok := base[r.Worker]
			if !ok {
				t.Fatalf("step %d: record %s/%d from worker %q, not one of %v", step, r.PromptID, r.Sample, r.Worker, cfg.Rollout.Endpoints)
			}
			if samples[r.PromptID] == nil {
				samples[r.PromptID] = map[int]bool{}
			}
			samples[r.PromptID][r.Sample] = true
			if byWorker[name] == nil {
				byWorker[name] = map[string]bool{}
			}
			byWorker[name][r.PromptID] = true
			if len(r.Tokens) == 0 || len(r.Logprobs) != len(r.Tokens) || len(r.PromptTokens) == 0 {
				t.Fatalf("step %d: record %s/%d: %d tokens, %d log-probs, %d prompt tokens", step, r.PromptID, r.Sample, len(r.Tokens), len(r.Logprobs), len(r.PromptTokens))
			}
		}
		if len(recs) != 8*4 || len(samples) != 8 {
			t.Fatalf("step %d: %d records of %d prompts, want 32 of 8: groups lost", step, len(recs), len(samples))
		}
		for id, s := range samples {
			if len(s) != 4 {
				t.Fatalf("step %d: prompt %s has samples %v", step, id, s)
			}
		}
		for id := range byWorker["A"] {
			if byWorker["B"][id] {
				t.Fatalf("step %d: group %s has records from both workers", step, id)
			}
		}
		rb, err := os.ReadFile(filepath.Join(sdir, pipeline.WorkersFile))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(rb, &reports[step]); err != nil {
			t.Fatal(err)
		}
		r := reports[step]
		if r.Groups != 8 || len(r.Workers) != 2 || r.Workers[0].Groups+r.Workers[1].Groups != 8 {
			t.Fatalf("step %d: workers.json %+v", step, r)
		}
		if r.Workers[0].Groups != len(byWorker["A"]) || r.Workers[1].Groups != len(byWorker["B"]) {
			t.Fatalf("step %d: workers.json counts %d and %d groups, the records %d and %d", step, r.Workers[0].Groups, r.Workers[1].Groups, len(byWorker["A"]), len(byWorker["B"]))
		}
		t.Logf("step %d: A %d groups, B %d groups, retries %d, B failures %d, B: %q", step, r.Workers[0].Groups, r.Workers[1].Groups, r.Retries, r.Workers[1].Failures, r.Workers[1].Refused)
		if step != 2 && (len(byWorker["A"]) == 0 || len(byWorker["B"]) == 0) {
			t.Errorf("step %d: groups by worker A %d, B %d: want both used", step, len(byWorker["A"]), len(byWorker["B"]))
		}
	}
	if r := reports[2]; r.Retries < 1 || r.Workers[1].Failures < 1 {
		t.Errorf("step 2: B was killed holding requests, yet %d retries and %d failures", r.Retries, r.Workers[1].Failures)
	}
	// Steps 1 and 2 sampled with different adapters (init, then step 1's).
	if reports[1].AdapterSHA256 == reports[2].AdapterSHA256 || reports[2].AdapterSHA256 == reports[3].AdapterSHA256 {
		t.Errorf("the steps' adapters: %s %s %s", reports[1].AdapterSHA256, reports[2].AdapterSHA256, reports[3].AdapterSHA256)
	}

	// Both workers end on the run's last adapter.
	last, err := dataset.FileSHA256(filepath.Join(cfg.Run.Out, "checkpoints", "step-0003", "adapter.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	for name, u := range map[string]string{"A": a.url, "B": restartedB.url} {
		h, err := getHealth(u)
		if err != nil {
			t.Fatal(err)
		}
		if h["adapter_sha256"] != last {
			t.Errorf("worker %s ended on adapter %v, the run's last is %s", name, h["adapter_sha256"], last)
		}
	}

	// The metrics: every step, with where its log-probs and groups came from.
	rows, err := metrics.Read(filepath.Join(cfg.Run.Out, metrics.JSONLFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 || len(res.Rows) != 3 {
		t.Fatalf("%d metric rows (%d in the result), want 3", len(rows), len(res.Rows))
	}
	for i, r := range rows {
		if r.Step != i+1 || r.Workers < 1 || r.TeacherForced != 0 || r.TokensPerS <= 0 || r.MeanTokens <= 0 || r.RolloutS <= 0 || r.StepS <= 0 {
			t.Errorf("metrics row %d: %+v", i, r)
		}
		if r.Retries != reports[i+1].Retries {
			t.Errorf("step %d: metrics say %d retries, workers.json %d", r.Step, r.Retries, reports[i+1].Retries)
		}
	}
	if rows[0].Workers != 2 || rows[2].Workers != 2 {
		t.Errorf("workers per step: %d %d %d", rows[0].Workers, rows[1].Workers, rows[2].Workers)
	}
}
