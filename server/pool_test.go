package server

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
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

// partition forwards TCP connections to a server until the first
// completions request passes: from then on nothing goes through, either
// way, and no connection is closed, as when a network partition drops the
// packets: only the client's deadlines can tell.
type partition struct {
	ln    net.Listener
	cut   chan struct{} // closed at the cut
	at    time.Time     // when; read after cut is closed
	once  sync.Once
	conns sync.WaitGroup
}

func newPartition(t *testing.T, target string) *partition {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &partition{ln: ln, cut: make(chan struct{})}
	var open []net.Conn
	var mu sync.Mutex
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range open {
			c.Close()
		}
		mu.Unlock()
		p.conns.Wait()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			open = append(open, c, s)
			mu.Unlock()
			p.conns.Add(2)
			go func() { defer p.conns.Done(); p.pipe(s, c, true) }()
			go func() { defer p.conns.Done(); p.pipe(c, s, false) }()
		}
	}()
	return p
}

// pipe copies src to dst until the cut; requests (fromClient) are read for
// the completions request that makes the cut, which is not forwarded.
func (p *partition) pipe(dst, src net.Conn, fromClient bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if fromClient && bytes.Contains(buf[:n], []byte("POST /v1/completions")) {
			p.once.Do(func() { p.at = time.Now(); close(p.cut) })
		}
		select {
		case <-p.cut:
			io.Copy(io.Discard, src) // held: nothing forwarded, nothing closed
			return
		default:
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// TestPoolLostWorkerGoesElsewhere: a worker cut off by a partition while
// it holds a group (its request sent, nothing coming back, no connection
// closed) is found lost by its silent /health within Lost + HealthTimeout +
// Poll, far inside the request timeout (left at 10 minutes), and its group
// goes to the other worker: every group comes back once, from the other
// worker, with the failures and retries counted.
func TestPoolLostWorkerGoesElsewhere(t *testing.T) {
	cfg := testConfig()
	good, _, _ := startServer(t, cfg, Options{})
	far, _, _ := startServer(t, cfg, Options{})
	cut := newPartition(t, strings.TrimPrefix(strings.TrimSuffix(far, "/v1"), "http://"))
	farURL := "http://" + cut.ln.Addr().String() + "/v1"
	pool := NewPool([]string{good, farURL}, Client{Concurrency: 2})
	pool.Poll = 100 * time.Millisecond
	pool.HealthTimeout = 500 * time.Millisecond
	pool.Lost = time.Second
	var log lockedBuffer
	pool.Log = &log
	var prompts []dataset.Prompt
	for i := range 8 {
		l := fmt.Sprintf("Say %d:", i)
		prompts = append(prompts, dataset.Prompt{ID: l, Prompt: l})
	}
	ctx := context.Background()
	if err := pool.SetAdapter(ctx, "", ""); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	st, err := pool.Generate(ctx, cfg, prompts, func(g []dataset.Rollout) error {
		if got[g[0].PromptID] {
			t.Errorf("group %s twice", g[0].PromptID)
		}
		got[g[0].PromptID] = true
		for _, r := range g {
			if r.Worker != good {
				t.Errorf("group %s from %s, which was cut off before it answered anything", r.PromptID, r.Worker)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	select {
	case <-cut.cut:
	default:
		t.Fatal("no request reached the worker behind the partition")
	}
	took := time.Since(cut.at)
	if len(got) != len(prompts) || st.Groups != len(prompts) {
		t.Fatalf("%d groups of %d (stats %+v)", len(got), len(prompts), st)
	}
	rep := pool.Report()
	if rep.Workers[1].Failures < 1 || rep.Retries != rep.Workers[1].Failures || rep.Workers[1].Groups != 0 {
		t.Fatalf("report %+v", rep)
	}
	if !strings.Contains(log.String(), farURL+" lost: no /health answer") {
		t.Fatalf("the pool's log says nothing of the loss:\n%s", log.String())
	}
	bound := pool.Lost + pool.HealthTimeout + pool.Poll + 2*time.Second // the rest: the retried groups
	if took > bound {
		t.Fatalf("the step ended %s after the partition, beyond %s", took, bound)
	}
	t.Logf("the step ended %s after the partition; pool log:\n%s", took.Round(time.Millisecond), log.String())
}
