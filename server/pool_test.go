package server

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/confclip/confclip/dataset"
)

// TestPoolTimeoutGoesElsewhere: beside a confclip serve worker, a server
// that takes requests and never answers them (a hung node). Its groups time
// out and go to the serve worker: every group comes back once, from the
// serve worker, with the hung one's failures and the retries counted; the
// records are those serve gives for the prompt, seed and id alone.
func TestPoolTimeoutGoesElsewhere(t *testing.T) {
	cfg := testConfig()
	good, _, _ := startServer(t, cfg, Options{})
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
			w.Write([]byte(`{"status":"ok","queued":0,"running":0}`))
		case "/v1/models":
			w.Write([]byte(`{"data":[{"id":"tiny"}]}`))
		default:
			io.Copy(io.Discard, r.Body) // then a closed connection cancels r's context
			select {                    // answers nothing, until the client gives up
			case <-r.Context().Done():
			case <-time.After(20 * time.Second):
			}
		}
	}))
	t.Cleanup(func() { hung.CloseClientConnections(); hung.Close() })
	pool := NewPool([]string{hung.URL + "/v1", good}, Client{Concurrency: 4})
	pool.Timeout = time.Second
	pool.Poll = 50 * time.Millisecond
	var prompts []dataset.Prompt
	for _, l := range []string{"Say 1:", "Say 2:", "Say 3:", "Say 4:", "Say 5:", "Say 6:"} {
		prompts = append(prompts, dataset.Prompt{ID: l, Prompt: l})
	}
	ctx := context.Background()
	if err := pool.SetAdapter(ctx, "", ""); err != nil {
		t.Fatal(err)
	}
	got := map[string][]dataset.Rollout{}
	st, err := pool.Generate(ctx, cfg, prompts, func(g []dataset.Rollout) error {
		if _, dup := got[g[0].PromptID]; dup {
			t.Errorf("group %s twice", g[0].PromptID)
		}
		got[g[0].PromptID] = g
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(prompts) || st.Groups != len(prompts) || len(st.Errors) != 0 {
		t.Fatalf("%d groups of %d (stats %+v)", len(got), len(prompts), st)
	}
	for id, g := range got {
		for _, r := range g {
			if r.Worker != good {
				t.Fatalf("group %s sample %d from %q, want %q", id, r.Sample, r.Worker, good)
			}
		}
	}
	rep := pool.Report()
	if rep.Retries < 1 || rep.Workers[0].Failures < 1 || rep.Workers[0].Groups != 0 || rep.Workers[1].Groups != len(prompts) {
		t.Fatalf("report %+v", rep)
	}
	if rep.Workers[0].Uploads || !rep.Workers[1].Uploads {
		t.Fatalf("uploads: %+v", rep.Workers)
	}

	// The same prompts, seed and ids through one client: the same samples.
	var one []dataset.Rollout
	c := &Client{Endpoint: good}
	if _, err := c.Generate(ctx, cfg, prompts, func(g []dataset.Rollout) error { one = append(one, g...); return nil }); err != nil {
		t.Fatal(err)
	}
	for _, r := range one {
		p := got[r.PromptID][r.Sample]
		if p.Text != r.Text || len(p.Tokens) != len(r.Tokens) {
			t.Fatalf("%s/%d: %q through the pool, %q alone", r.PromptID, r.Sample, p.Text, r.Text)
		}
	}
}
