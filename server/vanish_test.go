package server

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/pipeline"
	"github.com/confclip/confclip/train"
)

// serveOn runs Serve, as `confclip serve` does, on a Listen socket of
// 127.0.0.1, with its access log; it returns the base URL and the host:port.
func serveOn(t *testing.T, cfg pipeline.Config, o Options) (string, string, *lockedBuffer) {
	t.Helper()
	m, err := pipeline.OpenModel(cfg.Model)
	if err != nil {
		t.Fatal(err)
	}
	log := &lockedBuffer{}
	o.Config, o.AccessLog = cfg, log
	s, err := New(m, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ln, err := Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { s.Serve(ctx, ln); close(done) }()
	t.Cleanup(func() { cancel(); <-done; m.Close() })
	return "http://" + ln.Addr().String() + "/v1", ln.Addr().String(), log
}

// waitFor polls cond every 10 ms until it holds or the limit passes.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(limit); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, limit)
		}
	}
}

// rawRequest writes an HTTP/1.1 request's head and the first part of its
// body on a TCP connection of its own: the test then cuts it off.
func rawRequest(t *testing.T, addr, method, path string, header map[string]string, body []byte, contentLength int) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n", method, path, addr, contentLength)
	for k, v := range header {
		fmt.Fprintf(&b, "%s: %s\r\n", k, v)
	}
	b.WriteString("\r\n")
	if _, err := c.Write(append([]byte(b.String()), body...)); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestClientLeavesFreesSlot: a server with one sequence slot takes a
// request whose group (64 samples of up to 400 tokens, one after another
// in the slot) runs for seconds; its client closes the connection once it
// is running. The engine drops the group at its next step: /health shows
// nothing running, the request ends as 499 (not 200, as it would after
// generating everything), and the next client's request is served.
func TestClientLeavesFreesSlot(t *testing.T) {
	cfg := testConfig()
	cfg.Model.Ctx = 448
	cfg.Rollout.Parallel = 1
	url, addr, log := serveOn(t, cfg, Options{})
	body := []byte(`{"prompt": "Say 1:", "n": 64, "max_tokens": 400, "temperature": 1, "stop": []}`)
	c := rawRequest(t, addr, "POST", "/v1/completions", map[string]string{"Content-Type": "application/json"}, body, len(body))
	running := func() float64 {
		h, err := getJSON(url)
		if err != nil {
			t.Fatal(err)
		}
		return h["running"].(float64)
	}
	waitFor(t, 30*time.Second, "the long request running", func() bool { return running() == 1 })
	left := time.Now()
	c.Close()
	waitFor(t, 10*time.Second, "the slot freed after the client left", func() bool { return running() == 0 })
	t.Logf("slot freed %s after the client closed its connection", time.Since(left).Round(time.Millisecond))
	waitFor(t, 5*time.Second, "the request's access-log line", func() bool { return strings.Contains(log.String(), "POST /v1/completions") })
	if line := log.String(); !strings.Contains(line, "POST /v1/completions 499 ") {
		t.Fatalf("the abandoned request was not given up: %s", line)
	}
	if st, b := post(t, url+"/completions", map[string]any{"prompt": "Say 2:", "max_tokens": 4}); st != http.StatusOK {
		t.Fatalf("the next request: %d %v", st, b)
	}
}

func getJSON(url string) (map[string]any, error) {
	resp, err := http.Get(strings.TrimSuffix(url, "/v1") + "/health")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var h map[string]any
	return h, json.NewDecoder(resp.Body).Decode(&h)
}

// TestHalfUploadLeavesNothing: an adapter upload cut off halfway, once by
// the client closing its connection and once by a client that stops
// sending (a silent peer: the server gives up after BodyTimeout, 408),
// leaves no file in the adapter folder, not even the temporary one it was
// being written to, and no adapter loaded; the whole upload then works.
func TestHalfUploadLeavesNothing(t *testing.T) {
	cfg := testConfig()
	lm, err := llama.LoadModel(tinyModel, llama.ModelParams{})
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "a.gguf")
	err = train.CreateLoRA(lm, src, train.Config{LoraRank: 2, LoraAlpha: 4, Seed: 1})
	lm.Close()
	if err != nil {
		t.Fatal(err)
	}
	adapter, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(adapter)
	sum := hex.EncodeToString(h[:])
	dir := t.TempDir()
	url, addr, log := serveOn(t, cfg, Options{AdapterDir: dir, BodyTimeout: time.Second})
	header := map[string]string{"Content-Type": "application/octet-stream", AdapterSHA256Header: sum}
	files := func() []string {
		ents, _ := os.ReadDir(dir)
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		return names
	}
	nothingLoaded := func(when string) {
		t.Helper()
		st, err := getJSON(url)
		if err != nil {
			t.Fatal(err)
		}
		if st["adapter_sha256"] != "" {
			t.Fatalf("%s: /health reports adapter %v", when, st["adapter_sha256"])
		}
	}
	half := adapter[:len(adapter)/2]

	// The client closes its connection halfway.
	c := rawRequest(t, addr, "PUT", "/v1/adapters/cut.gguf", header, half, len(adapter))
	waitFor(t, 10*time.Second, "the upload's temporary file", func() bool { return len(files()) == 1 })
	t.Logf("halfway: %v", files())
	c.Close()
	waitFor(t, 10*time.Second, "the cut upload's access-log line", func() bool { return strings.Contains(log.String(), "PUT /v1/adapters/cut.gguf") })
	if f := files(); len(f) != 0 {
		t.Fatalf("a cut upload left %v", f)
	}
	nothingLoaded("after the cut upload")

	// The client goes silent halfway: 408 after BodyTimeout.
	c = rawRequest(t, addr, "PUT", "/v1/adapters/stalled.gguf", header, half, len(adapter))
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%v; files %v; log:\n%s", err, files(), log)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("a stalled upload: status %d, want 408", resp.StatusCode)
	}
	if f := files(); len(f) != 0 {
		t.Fatalf("a stalled upload left %v", f)
	}
	nothingLoaded("after the stalled upload")

	// The whole adapter: stored and loaded.
	req, _ := http.NewRequest(http.MethodPut, url+"/adapters/whole.gguf", bytes.NewReader(adapter))
	req.Header.Set(AdapterSHA256Header, sum)
	r2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r2.Body.Close()
	st, err := getJSON(url)
	if err != nil {
		t.Fatal(err)
	}
	if r2.StatusCode != http.StatusOK || st["adapter_sha256"] != sum || strings.Join(files(), " ") != "whole.gguf" {
		t.Fatalf("the whole upload: status %d, /health %v, folder %v", r2.StatusCode, st, files())
	}
}
