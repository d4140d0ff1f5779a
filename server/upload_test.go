package server

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/train"
)

// TestAdapterUpload: PUT /v1/adapters/NAME stores the body in the adapter
// folder and switches to it, /health then reports its sha256; without
// --adapter-dir it is refused (403), as are names with a folder or without
// .gguf (400), a body over the limit (413), a body whose hash is not the
// header's and a body that is no adapter (400), none of which leave a file.
func TestAdapterUpload(t *testing.T) {
	cfg := testConfig()
	src := t.TempDir()
	lm, err := llama.LoadModel(tinyModel, llama.ModelParams{})
	if err != nil {
		t.Fatal(err)
	}
	adapter := filepath.Join(src, "a.gguf")
	if err := train.CreateLoRA(lm, adapter, train.Config{LoraRank: 2, LoraAlpha: 4, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	lm.Close()
	body, err := os.ReadFile(adapter)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(body)
	sum := hex.EncodeToString(h[:])

	put := func(url, name string, b []byte, hash string) (int, map[string]any) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPut, url+"/adapters/"+name, bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		if hash != "" {
			req.Header.Set(AdapterSHA256Header, hash)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	health := func(url string) map[string]any {
		t.Helper()
		resp, err := http.Get(strings.TrimSuffix(url, "/v1") + "/health")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		json.NewDecoder(resp.Body).Decode(&out)
		return out
	}

	off, _, _ := startServer(t, cfg, Options{})
	if st, b := put(off, "a.gguf", body, ""); st != http.StatusForbidden {
		t.Fatalf("an upload without --adapter-dir: %d %v", st, b)
	}

	dir := t.TempDir()
	url, _, _ := startServer(t, cfg, Options{AdapterDir: dir, MaxAdapterBytes: int64(len(body))})
	if h := health(url); h["adapter_sha256"] != "" {
		t.Fatalf("health before any adapter: %v", h)
	}
	for _, name := range []string{"x.bin", ".hidden.gguf", "..%2Fx.gguf", "sub%2Fx.gguf"} {
		if st, b := put(url, name, body, ""); st != http.StatusBadRequest && st != http.StatusNotFound {
			t.Errorf("name %q: %d %v", name, st, b)
		}
	}
	if st, b := put(url, "big.gguf", append(body, 0), ""); st != http.StatusRequestEntityTooLarge {
		t.Errorf("a body over the limit: %d %v", st, b)
	}
	if st, b := put(url, "bad.gguf", body, strings.Repeat("0", 64)); st != http.StatusBadRequest {
		t.Errorf("a body with another hash: %d %v", st, b)
	}
	if st, b := put(url, "junk.gguf", []byte("not a gguf file"), ""); st != http.StatusBadRequest {
		t.Errorf("a body that is no adapter: %d %v", st, b)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("refused uploads left files: %v", ents)
	}
	st, b := put(url, "step-1.gguf", body, sum)
	if st != http.StatusOK || b["adapter_sha256"] != sum {
		t.Fatalf("the upload: %d %v", st, b)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "step-1.gguf")); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("stored file: %v (%d bytes of %d)", err, len(got), len(body))
	}
	if h := health(url); h["adapter_sha256"] != sum || h["adapter"] != filepath.Join(dir, "step-1.gguf") {
		t.Fatalf("health after the upload: %v", h)
	}
	if st, b := post(t, url+"/completions", map[string]any{"prompt": "Say 1:", "max_tokens": 3}); st != 200 {
		t.Fatalf("a request with the uploaded adapter: %d %v", st, b)
	}
	// A request pinned to another adapter gets 409; to this one, 200.
	for _, tc := range []struct {
		pin  string
		want int
	}{{strings.Repeat("ab", 32), http.StatusConflict}, {sum, http.StatusOK}} {
		req, _ := http.NewRequest(http.MethodPost, url+"/completions", strings.NewReader(`{"prompt": "Say 1:", "max_tokens": 3}`))
		req.Header.Set(AdapterSHA256Header, tc.pin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("a request pinned to adapter %s...: status %d, want %d", tc.pin[:8], resp.StatusCode, tc.want)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("the folder holds %v, want the adapter only", ents)
	}
}
