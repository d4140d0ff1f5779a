package server

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/confclip/confclip/pipeline"
)

// lockedBuffer is a bytes.Buffer for writers on several goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestServeLifecycle: Serve answers on the listener, logs each request,
// and when its context ends it stops listening, says so, and returns nil.
func TestServeLifecycle(t *testing.T) {
	cfg := testConfig()
	m, err := pipeline.OpenModel(cfg.Model)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var access, notes lockedBuffer
	s, err := New(m, Options{Config: cfg, AccessLog: &access, Log: &notes, ShutdownTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	url := "http://" + ln.Addr().String() + "/health"
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(access.String(), "GET /health 200") {
		t.Fatalf("health: %d, access log %q", resp.StatusCode, access.String())
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not return after its context ended")
	}
	if n := notes.String(); !strings.Contains(n, "shutting down") || !strings.HasSuffix(n, "stopped\n") {
		t.Errorf("notes %q", n)
	}
	if _, err := http.Get(url); err == nil {
		t.Error("still serving after Serve returned")
	}
}

// TestServeListenerError: a listener that fails ends Serve with its error
// (and the scheduler stopped: Close returns).
func TestServeListenerError(t *testing.T) {
	cfg := testConfig()
	m, err := pipeline.OpenModel(cfg.Model)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	s, err := New(m, Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	if err := s.Serve(context.Background(), ln); err == nil {
		t.Fatal("Serve on a closed listener returned nil")
	}
}
