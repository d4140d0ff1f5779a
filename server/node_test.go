package server

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/testkit/testutil"
)

// TestOpenAINodeClient runs testdata/openai-client/openai-client.mjs, which
// calls confclip serve with the official openai npm package: completions
// and chat completions with log-probs (top_logprobs: 2), a streamed chat completion, a bad
// request and the model list. The package is installed into the script's
// folder (node_modules, git-ignored) the first time; without node and npm,
// or when npm cannot install it, the test says NOT RUN.
func TestOpenAINodeClient(t *testing.T) {
	cfg := testConfig()
	cfg.Rollout.MaxTokens = 0 // the default: a request without max_tokens gets the context left
	url, s, _ := startServer(t, cfg, Options{})
	res := runOpenAIClient(t, url, s.ModelID())
	t.Logf("openai (npm) against confclip serve: %s", res.raw)
}

// TestRealModelsOpenAINodeClient runs the same openai npm client against
// confclip serve on the real pre-trained models (`make real-models`; NOT RUN
// without them), chat rendered through each model's own template (Gemma's
// GGUF carries none: the built-in gemma one). The chat request's prompt must
// be the template's text to the token: its usage.prompt_tokens is checked
// against the template written out by hand.
func TestRealModelsOpenAINodeClient(t *testing.T) {
	for _, c := range []struct{ name, tmpl, rendered string }{
		{"smollm2-135m-instruct", "", "<|im_start|>user\nSay 2:<|im_end|>\n<|im_start|>assistant\n"},
		{"gemma3-270m", "gemma", "<start_of_turn>user\nSay 2:<end_of_turn>\n<start_of_turn>model\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.Model.Path = testutil.RealModel(t, c.name)
			// the request without max_tokens runs to the context's end: 96
			// tokens keep it short (the test ran past its limit at 256 on a
			// busy CI machine, docs/speed.md "A busy machine")
			cfg.Model.Ctx = 96
			cfg.Model.ChatTemplate = c.tmpl
			cfg.Rollout.MaxTokens = 0
			url, s, _ := startServer(t, cfg, Options{})
			res := runOpenAIClient(t, url, s.ModelID())
			m, err := llama.LoadModel(cfg.Model.Path, llama.ModelParams{VocabOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			want, err := m.Tokenize(c.rendered, true, true) // with the BOS the vocabulary adds
			if err != nil {
				t.Fatal(err)
			}
			if res.Chat.PromptTokens != len(want) {
				t.Fatalf("the chat prompt was %d tokens; %q through the template is %d", res.Chat.PromptTokens, c.rendered, len(want))
			}
			if strings.TrimSpace(res.Chat.Content) == "" {
				t.Fatalf("an empty chat answer: %s", res.raw)
			}
			t.Logf("openai (npm) against confclip serve on %s: %s", c.name, res.raw)
		})
	}
}

// openAIResult is what openai-client.mjs saw.
type openAIResult struct {
	Completions struct{ Choices, Tokens int }
	Chat        struct {
		Content      string
		Logprobs     int
		TopLogprobs  []int `json:"top_logprobs"`
		PromptTokens int   `json:"prompt_tokens"`
	}
	Stream     struct{ Chunks int }
	BadRequest struct{ Status int } `json:"bad_request"`
	Models     []string
	raw        string
}

// runOpenAIClient runs testdata/openai-client/openai-client.mjs against the
// server at url serving model, checks what every test of it needs, and
// returns what it saw. Without node and npm, or when npm cannot install the
// package, the test says NOT RUN.
func runOpenAIClient(t *testing.T, url, model string) openAIResult {
	t.Helper()
	node, err1 := exec.LookPath("node")
	npm, err2 := exec.LookPath("npm")
	if err1 != nil || err2 != nil {
		t.Skip("NOT RUN: node and npm are needed (Debian: apt-get install nodejs npm)")
	}
	dir, _ := filepath.Abs(filepath.Join("testdata", "openai-client"))
	npmInstall.Do(func() {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai", "package.json")); err == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, npm, "install", "--no-audit", "--no-fund", "--loglevel=error")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			npmErr = fmt.Errorf("%v\n%s", err, out)
		}
	})
	if npmErr != nil {
		t.Skipf("NOT RUN: npm install openai failed (no access to the npm registry?): %v", npmErr)
	}
	// a hang's limit, with room for a machine whose cores are shared
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "openai-client.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "OPENAI_BASE_URL="+url, "MODEL="+model)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the openai client failed: %v\n%s\n%s", err, out, stderr.String())
	}
	var res openAIResult
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	res.raw = string(out)
	for _, n := range res.Chat.TopLogprobs {
		if n != 2 {
			t.Fatalf("top_logprobs: 2 gave %v alternatives per token: %s", res.Chat.TopLogprobs, out)
		}
	}
	if res.Completions.Choices != 2 || res.Chat.Logprobs == 0 || len(res.Chat.TopLogprobs) != res.Chat.Logprobs || res.Stream.Chunks < 3 || res.BadRequest.Status != 400 || len(res.Models) != 1 || res.Models[0] != model {
		t.Fatalf("the openai client saw %s", out)
	}
	return res
}

// npmInstall installs the openai package once per test binary.
var (
	npmInstall sync.Once
	npmErr     error
)
