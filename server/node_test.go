package server

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestOpenAINodeClient runs testdata/openai-client/openai-client.mjs, which
// calls confclip serve with the official openai npm package: completions
// and chat completions with log-probs (top_logprobs: 2), a streamed chat completion, a bad
// request and the model list. The package is installed into the script's
// folder (node_modules, git-ignored) the first time; without node and npm,
// or when npm cannot install it, the test says NOT RUN.
func TestOpenAINodeClient(t *testing.T) {
	node, err1 := exec.LookPath("node")
	npm, err2 := exec.LookPath("npm")
	if err1 != nil || err2 != nil {
		t.Skip("NOT RUN: node and npm are needed (Debian: apt-get install nodejs npm)")
	}
	dir, _ := filepath.Abs(filepath.Join("testdata", "openai-client"))
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai", "package.json")); err != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, npm, "install", "--no-audit", "--no-fund", "--loglevel=error")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Skipf("NOT RUN: npm install openai failed (no access to the npm registry?): %v\n%s", err, out)
		}
	}
	cfg := testConfig()
	cfg.Rollout.MaxTokens = 0 // the default: a request without max_tokens gets the context left
	url, s, _ := startServer(t, cfg, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "openai-client.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "OPENAI_BASE_URL="+url, "MODEL="+s.ModelID())
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the openai client failed: %v\n%s\n%s", err, out, stderr.String())
	}
	var res struct {
		Completions struct{ Choices, Tokens int }
		Chat        struct {
			Logprobs    int
			TopLogprobs []int `json:"top_logprobs"`
		}
		Stream     struct{ Chunks int }
		BadRequest struct{ Status int } `json:"bad_request"`
		Models     []string
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for _, n := range res.Chat.TopLogprobs {
		if n != 2 {
			t.Fatalf("top_logprobs: 2 gave %v alternatives per token: %s", res.Chat.TopLogprobs, out)
		}
	}
	if res.Completions.Choices != 2 || res.Chat.Logprobs == 0 || len(res.Chat.TopLogprobs) != res.Chat.Logprobs || res.Stream.Chunks < 3 || res.BadRequest.Status != 400 || len(res.Models) != 1 || res.Models[0] != s.ModelID() {
		t.Fatalf("the openai client saw %s", out)
	}
	t.Logf("openai (npm) against confclip serve: %s", out)
}
