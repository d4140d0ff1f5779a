package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/pipeline"
)

// BenchmarkServeVsBatch generates the same 128 prompts (16 tokens each,
// temperature 1, one seed, the prompts' ids) twice per iteration: through
// confclip serve on 127.0.0.1 with 32 concurrent clients, one request per
// prompt, and as one local batch rollout with as many slots; it reports
// both completion-token rates (the best of the iterations) and their ratio.
// Both produce the same tokens, which it checks.
func BenchmarkServeVsBatch(b *testing.B) {
	cfg := testConfig()
	cfg.Rollout.Parallel = 32
	cfg.Rollout.Group = 1
	cfg.Rollout.MaxTokens = 16
	cfg.Rollout.Temperature = 1
	cfg.Rollout.Seed = 1
	url, _, _ := startServer(b, cfg, Options{})
	prompts := make([]dataset.Prompt, 128)
	for i := range prompts {
		prompts[i] = dataset.Prompt{ID: fmt.Sprintf("b%d", i), Prompt: fmt.Sprintf("Say %d then %d:", i, i+1)}
	}
	m, err := pipeline.OpenModel(cfg.Model)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	e, err := m.NewEngine(pipeline.EngineOptions(cfg))
	if err != nil {
		b.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}}
	serve := func() (int, time.Duration) {
		start := time.Now()
		work := make(chan int)
		var mu sync.Mutex
		tokens := 0
		var wg sync.WaitGroup
		for range 32 {
			wg.Go(func() {
				for i := range work {
					body, _ := json.Marshal(map[string]any{"prompt": prompts[i].Prompt, "prompt_id": prompts[i].ID, "max_tokens": 16, "temperature": 1, "seed": 1})
					resp, err := hc.Post(url+"/completions", "application/json", bytes.NewReader(body))
					if err != nil {
						b.Error(err)
						return
					}
					var out struct {
						Usage usage `json:"usage"`
					}
					err = json.NewDecoder(resp.Body).Decode(&out)
					resp.Body.Close()
					if resp.StatusCode != 200 || err != nil {
						b.Errorf("status %d: %v", resp.StatusCode, err)
						return
					}
					mu.Lock()
					tokens += out.Usage.CompletionTokens
					mu.Unlock()
				}
			})
		}
		for i := range prompts {
			work <- i
		}
		close(work)
		wg.Wait()
		return tokens, time.Since(start)
	}
	batch := func() (int, time.Duration) {
		st, err := e.Generate(context.Background(), prompts, func([]dataset.Rollout) error { return nil })
		if err != nil {
			b.Fatal(err)
		}
		return st.Tokens, st.Elapsed
	}
	var rs, rb float64
	for i := 0; b.Loop(); i++ {
		// Alternate which goes first, so that neither always meets a
		// colder cache or a busier machine.
		var ts, tb int
		var ds, db time.Duration
		if i%2 == 0 {
			ts, ds = serve()
			tb, db = batch()
		} else {
			tb, db = batch()
			ts, ds = serve()
		}
		if ts != tb {
			b.Fatalf("serve sampled %d tokens, the batch %d: the same prompts, seed and ids should give the same completions", ts, tb)
		}
		rs = max(rs, float64(ts)/ds.Seconds())
		rb = max(rb, float64(tb)/db.Seconds())
	}
	b.ReportMetric(rs, "serve_tok/s")
	b.ReportMetric(rb, "batch_tok/s")
	b.ReportMetric(rs/rb, "ratio")
}
