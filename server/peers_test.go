package server

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/train"
)

// slowClient opens a connection to the server at url and sends a POST's
// headers and the first bytes of a body it never finishes.
func slowClient(t *testing.T, url string) net.Conn {
	t.Helper()
	host := strings.TrimPrefix(strings.TrimSuffix(url, "/v1"), "http://")
	c, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"pro", host)
	return c
}

// TestSlowClientsTakeNoSlot: issue 23's peers. Clients sending their body
// a byte at a time hold no request slot (a normal request is served, not
// refused with 429), and get 408 at the body timeout.
func TestSlowClientsTakeNoSlot(t *testing.T) {
	url, s, _ := startServer(t, testConfig(), Options{MaxRequests: 1, BodyTimeout: 2 * time.Second})
	var slow []net.Conn
	for range 4 {
		slow = append(slow, slowClient(t, url))
	}
	time.Sleep(200 * time.Millisecond) // the slow bodies are being read
	if st, b := post(t, url+"/completions", map[string]any{"prompt": "Say 1:", "max_tokens": 2}); st != 200 {
		t.Fatalf("a normal request beside slow clients: %d %v", st, b)
	}
	if n := s.inflight.Load(); n != 0 {
		t.Fatalf("%d slots held by clients still sending their bodies", n)
	}
	for _, c := range slow {
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestTimeout {
			t.Fatalf("a slow client got %d, want 408", resp.StatusCode)
		}
	}
}

// TestShutdownNotHeldBySlowClients: a shutdown with slow clients still
// sending completes well before their body timeout.
func TestShutdownNotHeldBySlowClients(t *testing.T) {
	url, _, hs := startServer(t, testConfig(), Options{BodyTimeout: time.Hour})
	for range 4 {
		slowClient(t, url)
	}
	time.Sleep(200 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := hs.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown with slow clients: %v (held until the deadline)", err)
	}
}

// TestAdapterLinkOutOfDir: a symlink in the adapter folder to a file
// outside it is refused; a link to a file inside is followed.
func TestAdapterLinkOutOfDir(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	lm, err := llama.LoadModel(tinyModel, llama.ModelParams{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(outside, "secret.gguf"), filepath.Join(dir, "a.gguf")} {
		if err := train.CreateLoRA(lm, p, train.Config{LoraRank: 2, LoraAlpha: 4, Seed: 1}); err != nil {
			t.Fatal(err)
		}
	}
	lm.Close()
	os.Symlink(filepath.Join(outside, "secret.gguf"), filepath.Join(dir, "evil.gguf"))
	os.Symlink("a.gguf", filepath.Join(dir, "good.gguf"))
	url, _, _ := startServer(t, testConfig(), Options{AdapterDir: dir})
	if st, b := post(t, url+"/adapters", map[string]any{"path": "evil.gguf"}); st == 200 || !strings.Contains(fmt.Sprint(b), "outside the adapter folder") {
		t.Fatalf("a link out of the adapter folder: %d %v", st, b)
	}
	if st, b := post(t, url+"/adapters", map[string]any{"path": "good.gguf"}); st != 200 {
		t.Fatalf("a link inside the adapter folder: %d %v", st, b)
	}
}
