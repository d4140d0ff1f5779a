package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/pipeline"
	"github.com/confclip/confclip/testkit/testutil"
	"github.com/confclip/confclip/train"
)

var tinyModel string

func TestMain(m *testing.M) { testutil.Main(m, &tinyModel) }

func testConfig() pipeline.Config {
	cfg := pipeline.DefaultConfig()
	cfg.Model.Path = tinyModel
	cfg.Model.Ctx = 96
	cfg.Model.ChatTemplate = "chatml"
	cfg.Rollout.Group = 3
	cfg.Rollout.MaxTokens = 8
	cfg.Rollout.Parallel = 8
	cfg.Rollout.Seed = 7
	return cfg
}

// startServer serves the tiny model on 127.0.0.1 and returns its base URL.
func startServer(t testing.TB, cfg pipeline.Config, o Options) (string, *Server, *http.Server) {
	t.Helper()
	m, err := pipeline.OpenModel(cfg.Model)
	if err != nil {
		t.Fatal(err)
	}
	o.Config = cfg
	s, err := New(m, o)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := s.HTTPServer()
	go hs.Serve(ln)
	t.Cleanup(func() {
		hs.Shutdown(context.Background())
		s.Close()
		m.Close()
	})
	return "http://" + ln.Addr().String() + "/v1", s, hs
}

func writePrompts(t testing.TB, lines ...string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "prompts.jsonl")
	if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func promptLines(n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf(`{"id":"p%d","prompt":"Say %d then %d:","answer":"%d"}`, i, i, i+1, i))
	}
	return out
}

// TestClientMatchesLocalRollout: rollout --endpoint against confclip serve
// gives the records a local rollout with the same seed gives: the same
// tokens, text and finish for every (prompt, sample), log-probs within
// 1e-5 (the server batches other sequences beside each one), plain and chat.
func TestClientMatchesLocalRollout(t *testing.T) {
	for _, chat := range []bool{false, true} {
		t.Run(fmt.Sprintf("chat=%v", chat), func(t *testing.T) {
			cfg := testConfig()
			cfg.Rollout.Chat = chat
			cfg.Rollout.Stop = []string{"\n\n"}
			url, _, _ := startServer(t, cfg, Options{})
			data := writePrompts(t, promptLines(10)...)
			ctx := context.Background()

			m, err := pipeline.OpenModel(cfg.Model)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			local := filepath.Join(t.TempDir(), "local.jsonl")
			if _, err := pipeline.Rollout(ctx, m, pipeline.RolloutOptions{Config: cfg, In: data, Out: local, NoTiming: true}); err != nil {
				t.Fatal(err)
			}
			remote := filepath.Join(t.TempDir(), "remote.jsonl")
			res, err := pipeline.Rollout(ctx, nil, pipeline.RolloutOptions{Config: cfg, In: data, Out: remote, NoTiming: true,
				Source: &Client{Endpoint: url, Concurrency: 4}})
			if err != nil {
				t.Fatal(err)
			}
			if res.Groups != 10 || res.Records != 30 || len(res.Failed) > 0 {
				t.Fatalf("remote rollout: %d groups, %d records, failed %v", res.Groups, res.Records, res.Failed)
			}
			a, b := readByKey(t, local), readByKey(t, remote)
			if len(a) != 30 || len(b) != 30 {
				t.Fatalf("%d local and %d remote records, want 30", len(a), len(b))
			}
			maxDiff := 0.0
			for k, x := range a {
				y, ok := b[k]
				if !ok {
					t.Fatalf("%s: no remote record", k)
				}
				if x.Text != y.Text || fmt.Sprint(x.Tokens) != fmt.Sprint(y.Tokens) || x.Finish != y.Finish || x.Seed != y.Seed || x.Answer != y.Answer {
					t.Fatalf("%s differs:\nlocal  %q %v %s\nremote %q %v %s", k, x.Text, x.Tokens, x.Finish, y.Text, y.Tokens, y.Finish)
				}
				if len(x.Logprobs) != len(y.Logprobs) {
					t.Fatalf("%s: %d local log-probs, %d remote", k, len(x.Logprobs), len(y.Logprobs))
				}
				for i := range x.Logprobs {
					maxDiff = max(maxDiff, math.Abs(x.Logprobs[i]-y.Logprobs[i]))
				}
			}
			if maxDiff > 1e-5 {
				t.Fatalf("log-probs differ by up to %g", maxDiff)
			}
			t.Logf("30 records equal; log-probs within %.2g", maxDiff)
		})
	}
}

func readByKey(t testing.TB, path string) map[string]dataset.Rollout {
	t.Helper()
	recs, _, _, err := dataset.ReadFile[dataset.Rollout](path, false)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]dataset.Rollout{}
	for _, r := range recs {
		out[fmt.Sprintf("%s/%d", r.PromptID, r.Sample)] = r
	}
	return out
}

func post(t testing.TB, url string, body any) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, _ := json.Marshal(b)
		rd = bytes.NewReader(j)
	}
	resp, err := http.Post(url, "application/json", rd)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	raw, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("POST %s: status %d, not JSON: %.200s", url, resp.StatusCode, raw)
	}
	return resp.StatusCode, out
}

// TestBadRequests: each bad request gets its 4xx status and an OpenAI error
// object with a message, and the server goes on serving.
func TestBadRequests(t *testing.T) {
	cfg := testConfig()
	url, _, _ := startServer(t, cfg, Options{MaxBodyBytes: 1 << 20})
	long := strings.Repeat("Say 1 2 3 ", 40)
	huge := `{"model":"tiny","prompt":"` + strings.Repeat("x", 10<<20) + `"}`
	for _, c := range []struct {
		name, path string
		body       any
		status     int
		want       string
	}{
		{"malformed JSON", "/completions", `{"prompt": "a",`, 400, "malformed JSON"},
		{"not an object", "/chat/completions", `[1, 2]`, 400, "malformed JSON"},
		{"unknown model", "/completions", map[string]any{"model": "gpt-9", "prompt": "a"}, 404, `model "gpt-9" does not exist`},
		{"n = 0", "/completions", map[string]any{"prompt": "a", "n": 0}, 400, "n = 0"},
		{"n too large", "/chat/completions", map[string]any{"messages": []any{map[string]any{"role": "user", "content": "a"}}, "n": 1000}, 400, "n = 1000"},
		{"max_tokens beyond the context", "/completions", map[string]any{"prompt": "a", "max_tokens": 100000}, 400, "beyond the context"},
		{"prompt + max_tokens too long", "/completions", map[string]any{"prompt": long, "max_tokens": 8}, 400, "does not fit"},
		{"10 MB body", "/completions", huge, 413, "over 1048576 bytes"},
		{"no prompt", "/completions", map[string]any{"model": "tiny"}, 400, "prompt is required"},
		{"no messages", "/chat/completions", map[string]any{"messages": []any{}}, 400, "at least one message"},
		{"negative temperature", "/completions", map[string]any{"prompt": "a", "temperature": -1}, 400, "temperature"},
		{"top_logprobs without logprobs", "/chat/completions", map[string]any{"messages": []any{map[string]any{"role": "user", "content": "a"}}, "top_logprobs": 2}, 400, "top_logprobs"},
		{"empty stop", "/completions", map[string]any{"prompt": "a", "stop": ""}, 400, "stop"},
		{"image part", "/chat/completions", map[string]any{"messages": []any{map[string]any{"role": "user", "content": []any{map[string]any{"type": "image_url"}}}}}, 400, "only text"},
		{"frequency_penalty", "/completions", map[string]any{"prompt": "a", "frequency_penalty": 0.5}, 400, "frequency_penalty = 0.5: not supported"},
		{"presence_penalty", "/chat/completions", map[string]any{"messages": []any{map[string]any{"role": "user", "content": "a"}}, "presence_penalty": -1}, 400, "presence_penalty = -1: not supported"},
		{"n of the wrong type", "/completions", map[string]any{"prompt": "a", "n": "2"}, 400, "n: a JSON string, want an integer"},
		{"unknown path", "/embeddings", map[string]any{"input": "a"}, 404, "no endpoint"},
	} {
		status, body := post(t, url+c.path, c.body)
		e, _ := body["error"].(map[string]any)
		msg, _ := e["message"].(string)
		if status != c.status || !strings.Contains(msg, c.want) {
			t.Errorf("%s: status %d, error %v; want %d with %q", c.name, status, body, c.status, c.want)
		}
	}
	resp, err := http.Get(url + "/completions")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 {
		t.Errorf("GET /v1/completions: status %d, want 405", resp.StatusCode)
	}
	// Still serving.
	status, body := post(t, url+"/completions", map[string]any{"prompt": "Say 1:", "max_tokens": 4, "frequency_penalty": 0})
	if status != 200 {
		t.Fatalf("a good request after the bad ones: %d %v", status, body)
	}
}

// TestMaxTokensOmitted: a request without max_tokens gets the context that
// is left after its prompt (llama-server's and vLLM's default), also when
// the server's context is smaller than any fixed default.
func TestMaxTokensOmitted(t *testing.T) {
	cfg := testConfig()
	cfg.Model.Ctx = 24
	cfg.Rollout.MaxTokens = 0 // the config's default
	url, _, _ := startServer(t, cfg, Options{})
	status, body := post(t, url+"/completions", map[string]any{"prompt": "Say 1:", "temperature": 1, "seed": 1, "n": 4, "logprobs": 0})
	if status != 200 {
		t.Fatalf("no max_tokens, ctx 24: %d %v", status, body)
	}
	prompt := int(body["usage"].(map[string]any)["prompt_tokens"].(float64))
	cut := 0
	for _, c := range body["choices"].([]any) {
		ch := c.(map[string]any)
		n := len(ch["logprobs"].(map[string]any)["tokens"].([]any))
		if ch["finish_reason"] == "length" {
			cut++
			if n != 24-prompt {
				t.Errorf("a completion cut at %d tokens; the context left after the %d-token prompt is %d", n, prompt, 24-prompt)
			}
		}
	}
	if cut == 0 {
		t.Fatal("no completion reached the length limit: the test shows nothing")
	}
}

// TestCompletionsAndChat: n choices, usage, log-probs in both shapes, a
// seed that makes a request repeatable, stop strings honoured.
func TestCompletionsAndChat(t *testing.T) {
	cfg := testConfig()
	url, _, _ := startServer(t, cfg, Options{})
	req := map[string]any{"model": "tiny", "prompt": []string{"Say 1:", "Say 2:"}, "n": 3, "max_tokens": 6, "seed": 5, "logprobs": 1, "temperature": 1.0, "top_k": 40, "min_p": 0.01}
	status, a := post(t, url+"/completions", req)
	if status != 200 {
		t.Fatalf("%d %v", status, a)
	}
	choices := a["choices"].([]any)
	if len(choices) != 6 {
		t.Fatalf("%d choices, want 2 prompts × n 3", len(choices))
	}
	// The same seed gives the same completions (log-probs within 1e-5:
	// the batch around a sequence changes the last bits).
	_, b := post(t, url+"/completions", req)
	for i, c := range choices {
		x, y := c.(map[string]any), b["choices"].([]any)[i].(map[string]any)
		lx, ly := x["logprobs"].(map[string]any)["token_logprobs"].([]any), y["logprobs"].(map[string]any)["token_logprobs"].([]any)
		if x["text"] != y["text"] || x["index"] != y["index"] || len(lx) != len(ly) {
			t.Fatalf("the same seed gave another completion: %q, then %q", x["text"], y["text"])
		}
		for k := range lx {
			if d := math.Abs(lx[k].(float64) - ly[k].(float64)); d > 1e-5 {
				t.Fatalf("choice %d token %d: log-probs %v and %v", i, k, lx[k], ly[k])
			}
		}
	}
	for _, c := range choices {
		c := c.(map[string]any)
		lp := c["logprobs"].(map[string]any)
		toks, lps := lp["tokens"].([]any), lp["token_logprobs"].([]any)
		var joined string
		for _, x := range toks {
			joined += x.(string)
		}
		// The pieces spell the text where it is whole characters (JSON
		// turns a piece's cut character into U+FFFD).
		text := c["text"].(string)
		if len(toks) != len(lps) || len(toks) == 0 || (!strings.ContainsRune(joined, utf8.RuneError) && joined != text) || len(lp["text_offset"].([]any)) != len(toks) {
			t.Fatalf("choice %v: %d tokens spelling %q, %d log-probs", c["index"], len(toks), joined, len(lps))
		}
		for _, x := range lps {
			if v := x.(float64); !(v <= 0) {
				t.Fatalf("log-prob %v > 0", v)
			}
		}
	}
	u := a["usage"].(map[string]any)
	if u["completion_tokens"].(float64) < 6 || u["total_tokens"].(float64) != u["prompt_tokens"].(float64)+u["completion_tokens"].(float64) {
		t.Fatalf("usage %v", u)
	}

	msgs := []any{map[string]any{"role": "system", "content": "Count."}, map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": "Say 3:"}}}}
	status, ch := post(t, url+"/chat/completions", map[string]any{"messages": msgs, "n": 2, "max_completion_tokens": 5, "logprobs": true, "top_logprobs": 1, "seed": 1})
	if status != 200 || ch["object"] != "chat.completion" {
		t.Fatalf("%d %v", status, ch)
	}
	for _, c := range ch["choices"].([]any) {
		c := c.(map[string]any)
		content := c["message"].(map[string]any)["content"].(string)
		lp := c["logprobs"].(map[string]any)["content"].([]any)
		var joined []byte
		for _, x := range lp {
			for _, by := range x.(map[string]any)["bytes"].([]any) {
				joined = append(joined, byte(by.(float64)))
			}
		}
		if string(joined) != content || len(lp) == 0 {
			t.Fatalf("chat choice: bytes of %d log-prob tokens spell %q, content %q", len(lp), joined, content)
		}
	}

	// A stop string: greedy, the text up to where it stops.
	_, full := post(t, url+"/completions", map[string]any{"prompt": "Say 1:", "max_tokens": 8, "temperature": 0})
	text := full["choices"].([]any)[0].(map[string]any)["text"].(string)
	if len(text) > 2 {
		stop := text[1:2]
		_, cut := post(t, url+"/completions", map[string]any{"prompt": "Say 1:", "max_tokens": 8, "temperature": 0, "stop": []string{stop}})
		c := cut["choices"].([]any)[0].(map[string]any)
		if got := c["text"].(string); strings.Contains(got, stop) || !strings.HasPrefix(text, got) || c["finish_reason"] != "stop" {
			t.Fatalf("stop %q: %q (finish %v) from %q", stop, got, c["finish_reason"], text)
		}
	}
}

// TestChatStream: the deltas of a streamed chat completion spell the
// completion the same request gives without streaming, with one log-prob
// per token, the finish reason, usage and [DONE].
func TestChatStream(t *testing.T) {
	cfg := testConfig()
	url, _, _ := startServer(t, cfg, Options{})
	// A prompt the engine refuses gets its 400 before any event.
	status, body := post(t, url+"/chat/completions", map[string]any{"messages": []any{map[string]any{"role": "user", "content": strings.Repeat("Say 1 2 3 ", 40)}}, "stream": true})
	if status != 400 || body["error"] == nil {
		t.Fatalf("a prompt too long, streamed: %d %v", status, body)
	}
	for _, stop := range [][]string{nil, {"e", " ", "ab"}} {
		t.Run(fmt.Sprintf("stop=%q", stop), func(t *testing.T) { streamMatches(t, url, stop) })
	}
}

// streamMatches: a streamed request's events spell what the same request
// gives without streaming.
func streamMatches(t *testing.T, url string, stop []string) {
	req := map[string]any{"messages": []any{map[string]any{"role": "user", "content": "Say 4:"}}, "max_tokens": 20, "seed": 3, "n": 3, "logprobs": true}
	if stop != nil {
		req["stop"] = stop
	}
	_, whole := post(t, url+"/chat/completions", req)
	req["stream"] = true
	req["stream_options"] = map[string]any{"include_usage": true}
	b, _ := json.Marshal(req)
	resp, err := http.Post(url+"/chat/completions", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	texts, lps, finish, chunks := map[int]string{}, map[int]int{}, map[int]string{}, map[int]int{}
	done, gotUsage := false, false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("not an SSE data line: %q", line)
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		var chunk struct {
			Object  string `json:"object"`
			Choices []struct {
				Index int `json:"index"`
				Delta struct {
					Content *string `json:"content"`
				} `json:"delta"`
				Logprobs *struct {
					Content []any `json:"content"`
				} `json:"logprobs"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage *usage `json:"usage"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil || chunk.Object != "chat.completion.chunk" {
			t.Fatalf("chunk %q: %v", data, err)
		}
		gotUsage = gotUsage || chunk.Usage != nil
		for _, c := range chunk.Choices {
			if c.Delta.Content != nil {
				texts[c.Index] += *c.Delta.Content
				chunks[c.Index]++
			}
			if c.Logprobs != nil {
				lps[c.Index] += len(c.Logprobs.Content)
			}
			if c.FinishReason != nil {
				finish[c.Index] = *c.FinishReason
			}
		}
	}
	if !done || !gotUsage {
		t.Fatalf("stream ended without [DONE] (%v) or usage (%v)", done, gotUsage)
	}
	for _, c := range whole["choices"].([]any) {
		c := c.(map[string]any)
		i := int(c["index"].(float64))
		want := c["message"].(map[string]any)["content"].(string)
		if texts[i] != want || finish[i] != c["finish_reason"] || lps[i] != len(c["logprobs"].(map[string]any)["content"].([]any)) {
			t.Fatalf("choice %d streamed %q (%s, %d log-probs), whole %q (%v)", i, texts[i], finish[i], lps[i], want, c["finish_reason"])
		}
		t.Logf("choice %d: %d tokens in %d content events", i, lps[i], chunks[i])
	}
}

// TestModelsHealthAdapter: /v1/models names the model, /health says ok,
// an adapter loads from the adapter folder and shows in /health, paths
// outside it are refused.
func TestModelsHealthAdapter(t *testing.T) {
	cfg := testConfig()
	dir := t.TempDir()
	lm, err := llama.LoadModel(tinyModel, llama.ModelParams{})
	if err != nil {
		t.Fatal(err)
	}
	if err := train.CreateLoRA(lm, filepath.Join(dir, "a.gguf"), train.Config{LoraRank: 2, LoraAlpha: 4, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	lm.Close()
	url, s, _ := startServer(t, cfg, Options{AdapterDir: dir})
	get := func(path string) map[string]any {
		resp, err := http.Get(strings.TrimSuffix(url, "/v1") + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		json.NewDecoder(resp.Body).Decode(&out)
		return out
	}
	models := get("/v1/models")
	if id := models["data"].([]any)[0].(map[string]any)["id"]; id != s.ModelID() || id != "tiny" {
		t.Fatalf("models %v", models)
	}
	if h := get("/health"); h["status"] != "ok" || h["adapter"] != "" {
		t.Fatalf("health %v", h)
	}
	if st, b := post(t, url+"/adapters", map[string]any{"path": "../x.gguf"}); st != 400 {
		t.Fatalf("an adapter outside the folder: %d %v", st, b)
	}
	if st, b := post(t, url+"/adapters", map[string]any{"path": "missing.gguf"}); st != 404 {
		t.Fatalf("a missing adapter: %d %v", st, b)
	}
	if st, b := post(t, url+"/adapters", map[string]any{"path": "a.gguf"}); st != 200 {
		t.Fatalf("loading the adapter: %d %v", st, b)
	}
	if h := get("/health"); h["adapter"] != filepath.Join(dir, "a.gguf") {
		t.Fatalf("health after the switch %v", h)
	}
	if st, b := post(t, url+"/completions", map[string]any{"prompt": "Say 1:", "max_tokens": 3}); st != 200 {
		t.Fatalf("a request with the adapter: %d %v", st, b)
	}
}

// TestGracefulShutdown: requests in flight when the server is told to stop
// finish with 200; a request after it is refused.
func TestGracefulShutdown(t *testing.T) {
	cfg := testConfig()
	url, s, hs := startServer(t, cfg, Options{})
	var wg sync.WaitGroup
	statuses := make([]int, 8)
	for i := range statuses {
		wg.Go(func() {
			statuses[i], _ = post(t, url+"/completions", map[string]any{"prompt": fmt.Sprintf("Say %d:", i), "max_tokens": 60, "n": 4})
		})
	}
	// Wait until the server has them all.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		s.mu.Lock()
		n := len(s.queue) + len(s.running)
		s.mu.Unlock()
		if n == len(statuses) {
			break
		}
	}
	if err := hs.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.Close()
	wg.Wait()
	for i, st := range statuses {
		if st != 200 {
			t.Fatalf("request %d in flight at shutdown: status %d", i, st)
		}
	}
	if _, err := http.Post(url+"/completions", "application/json", strings.NewReader(`{"prompt":"a"}`)); err == nil {
		t.Fatal("a request after shutdown was taken")
	}
}

// TestLoad runs 32 concurrent clients on loopback for CONFCLIP_LOAD_SECONDS
// (2 by default, so that CI stays quick; 30 for the figure), with
// no error allowed, then generates the same prompts with a local batch
// rollout, and reports both throughputs and their ratio.
func TestLoad(t *testing.T) {
	secs := 2.0
	if v := os.Getenv("CONFCLIP_LOAD_SECONDS"); v != "" {
		fmt.Sscan(v, &secs)
	}
	cfg := testConfig()
	cfg.Rollout.Parallel = 32
	cfg.Rollout.MaxTokens = 16
	url, _, _ := startServer(t, cfg, Options{})
	const clients = 32
	var mu sync.Mutex
	var requests, tokens int
	var errs []string
	var done []dataset.Prompt // what was served, for the batch
	stop := time.Now().Add(time.Duration(secs * float64(time.Second)))
	start := time.Now()
	var wg sync.WaitGroup
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	for c := range clients {
		wg.Go(func() {
			for i := 0; time.Now().Before(stop); i++ {
				body, _ := json.Marshal(map[string]any{"prompt": fmt.Sprintf("Say %d then %d:", c, i), "max_tokens": 16, "temperature": 1, "seed": 1,
					"prompt_id": fmt.Sprintf("c%d-%d", c, i)})
				resp, err := hc.Post(url+"/completions", "application/json", bytes.NewReader(body))
				if err != nil {
					mu.Lock()
					errs = append(errs, err.Error())
					mu.Unlock()
					return
				}
				var out struct {
					Usage usage `json:"usage"`
				}
				err = json.NewDecoder(resp.Body).Decode(&out)
				resp.Body.Close()
				mu.Lock()
				if resp.StatusCode != 200 || err != nil {
					errs = append(errs, fmt.Sprintf("status %d: %v", resp.StatusCode, err))
				} else {
					requests++
					tokens += out.Usage.CompletionTokens
					done = append(done, dataset.Prompt{ID: fmt.Sprintf("c%d-%d", c, i), Prompt: fmt.Sprintf("Say %d then %d:", c, i)})
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	served := time.Since(start)
	if len(errs) > 0 {
		t.Fatalf("%d errors under load (first: %s)", len(errs), errs[0])
	}
	if requests == 0 {
		t.Fatal("no request completed")
	}
	// The same work as one local batch: the same prompts, ids and settings.
	prompts := done
	m, err := pipeline.OpenModel(cfg.Model)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	bcfg := cfg
	bcfg.Rollout.Group = 1
	bcfg.Rollout.Seed = 1
	bcfg.Rollout.Temperature = 1
	e, err := m.NewEngine(pipeline.EngineOptions(bcfg))
	if err != nil {
		t.Fatal(err)
	}
	st, err := e.Generate(context.Background(), prompts, func([]dataset.Rollout) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if st.Tokens != tokens || st.Records != requests {
		t.Fatalf("the batch sampled %d tokens in %d records, the server %d in %d: the same prompts, seed and ids should give the same completions",
			st.Tokens, st.Records, tokens, requests)
	}
	serveRate := float64(tokens) / served.Seconds()
	t.Logf("serve: %d clients, %.1f s, %d requests, 0 errors, %d tokens: %.0f requests/s, %.0f tokens/s", clients, served.Seconds(), requests, tokens,
		float64(requests)/served.Seconds(), serveRate)
	t.Logf("local batch rollout of %d prompts: %d tokens in %.2f s: %.0f tokens/s; serve / batch = %.2f",
		len(prompts), st.Tokens, st.Elapsed.Seconds(), st.TokensPerSecond(), serveRate/st.TokensPerSecond())
}

// TestRequestLimit: beyond MaxRequests queued or running, a request gets
// 429 with Retry-After; the one in flight still completes.
func TestRequestLimit(t *testing.T) {
	url, s, _ := startServer(t, testConfig(), Options{MaxRequests: 1})
	first := make(chan int, 1)
	go func() {
		st, _ := post(t, url+"/completions", map[string]any{"prompt": "Say 1:", "max_tokens": 80, "n": 16})
		first <- st
	}()
	for deadline := time.Now().Add(10 * time.Second); s.inflight.Load() == 0 && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
	}
	resp, err := http.Post(url+"/completions", "application/json", strings.NewReader(`{"prompt":"Say 2:","max_tokens":2}`))
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || body["error"] == nil {
		t.Fatalf("over the limit: status %d, Retry-After %q, %v", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if st := <-first; st != 200 {
		t.Fatalf("the request in flight: status %d", st)
	}
}

// TestMixedSettingsShareTheBatch: requests with different n, max_tokens,
// temperature, top_k, min_p, stop and seed, sent together, are served in
// one batch, each as it is when sent alone: the same text, log-probs within
// 1e-5.
func TestMixedSettingsShareTheBatch(t *testing.T) {
	url, _, _ := startServer(t, testConfig(), Options{})
	var reqs []map[string]any
	for i := range 12 {
		r := map[string]any{"prompt": fmt.Sprintf("Say %d:", i), "n": 1 + i%3, "max_tokens": 4 + 3*(i%4), "seed": 10 + i%5,
			"temperature": []float64{1, 0.7, 0, 1.3}[i%4], "logprobs": 1}
		if i%3 == 1 {
			r["top_k"], r["min_p"] = 20, 0.02
		}
		if i%4 == 2 {
			r["stop"] = []string{"e", " "}
		}
		reqs = append(reqs, r)
	}
	alone := make([]map[string]any, len(reqs))
	for i, r := range reqs {
		st, b := post(t, url+"/completions", r)
		if st != 200 {
			t.Fatalf("request %d alone: %d %v", i, st, b)
		}
		alone[i] = b
	}
	together := make([]map[string]any, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Go(func() {
			st, b := post(t, url+"/completions", r)
			if st != 200 {
				t.Errorf("request %d together: %d %v", i, st, b)
			}
			together[i] = b
		})
	}
	wg.Wait()
	for i := range reqs {
		a, b := alone[i]["choices"].([]any), together[i]["choices"].([]any)
		if len(a) != reqs[i]["n"].(int) || len(a) != len(b) {
			t.Fatalf("request %d: %d and %d choices for n = %v", i, len(a), len(b), reqs[i]["n"])
		}
		for k := range a {
			x, y := a[k].(map[string]any), b[k].(map[string]any)
			if x["text"] != y["text"] || x["finish_reason"] != y["finish_reason"] {
				t.Fatalf("request %d choice %d: %q (%v) alone, %q (%v) together", i, k, x["text"], x["finish_reason"], y["text"], y["finish_reason"])
			}
			lx := x["logprobs"].(map[string]any)["token_logprobs"].([]any)
			ly := y["logprobs"].(map[string]any)["token_logprobs"].([]any)
			if len(lx) > reqs[i]["max_tokens"].(int) || len(lx) != len(ly) {
				t.Fatalf("request %d choice %d: %d and %d tokens, max_tokens %v", i, k, len(lx), len(ly), reqs[i]["max_tokens"])
			}
			for j := range lx {
				if d := math.Abs(lx[j].(float64) - ly[j].(float64)); d > 1e-5 {
					t.Fatalf("request %d choice %d token %d: log-probs differ by %g", i, k, j, d)
				}
			}
		}
	}
}

// TestClientPlain: with Plain the client sends OpenAI's fields only; the
// records carry the text and log-probs, no token ids, and a setting
// OpenAI's API lacks is refused before any request.
func TestClientPlain(t *testing.T) {
	cfg := testConfig()
	url, _, _ := startServer(t, cfg, Options{})
	data := writePrompts(t, promptLines(4)...)
	out := filepath.Join(t.TempDir(), "plain.jsonl")
	res, err := pipeline.Rollout(context.Background(), nil, pipeline.RolloutOptions{Config: cfg, In: data, Out: out, NoTiming: true,
		Source: &Client{Endpoint: url, Plain: true}})
	if err != nil || res.Records != 12 {
		t.Fatalf("plain rollout: %v, %d records", err, res.Records)
	}
	for _, r := range readByKey(t, out) {
		if len(r.Tokens) != 0 || len(r.Logprobs) == 0 || r.Text == "" {
			t.Fatalf("%s/%d: %d token ids, %d log-probs, text %q", r.PromptID, r.Sample, len(r.Tokens), len(r.Logprobs), r.Text)
		}
	}
	cfg.Rollout.TopK = 5
	_, err = pipeline.Rollout(context.Background(), nil, pipeline.RolloutOptions{Config: cfg, In: data, Out: filepath.Join(t.TempDir(), "x.jsonl"),
		Source: &Client{Endpoint: url, Plain: true}})
	if err == nil || !strings.Contains(err.Error(), "top_k") {
		t.Fatalf("top_k with a plain client: %v", err)
	}
}

// TestCompletionsStream: completions stream too (the openai client's
// completions.create({stream: true})), and the events spell the text,
// tokens and finish reasons of the same request without streaming.
func TestCompletionsStream(t *testing.T) {
	url, _, _ := startServer(t, testConfig(), Options{})
	req := map[string]any{"prompt": "Say 4:", "max_tokens": 12, "seed": 3, "n": 2, "temperature": 1, "logprobs": 0, "stop": []string{"e"}}
	_, whole := post(t, url+"/completions", req)
	req["stream"] = true
	b, _ := json.Marshal(req)
	resp, err := http.Post(url+"/completions", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	texts, tokens, finish := map[int]string{}, map[int]int{}, map[int]string{}
	done := false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		var chunk struct {
			Object  string `json:"object"`
			Choices []struct {
				Index    int     `json:"index"`
				Text     string  `json:"text"`
				Finish   *string `json:"finish_reason"`
				Logprobs *struct {
					Tokens []string `json:"tokens"`
				} `json:"logprobs"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil || chunk.Object != "text_completion" {
			t.Fatalf("event %s: %v", data, err)
		}
		for _, c := range chunk.Choices {
			texts[c.Index] += c.Text
			if c.Logprobs != nil {
				tokens[c.Index] += len(c.Logprobs.Tokens)
			}
			if c.Finish != nil {
				finish[c.Index] = *c.Finish
			}
		}
	}
	if !done {
		t.Fatal("no [DONE]")
	}
	for _, c := range whole["choices"].([]any) {
		ch := c.(map[string]any)
		i := int(ch["index"].(float64))
		n := len(ch["logprobs"].(map[string]any)["tokens"].([]any))
		if texts[i] != ch["text"] || finish[i] != ch["finish_reason"] || tokens[i] != n {
			t.Errorf("choice %d: streamed %q (%d tokens, %s), whole %q (%d tokens, %s)", i, texts[i], tokens[i], finish[i], ch["text"], n, ch["finish_reason"])
		}
	}
	if status, body := post(t, url+"/completions", map[string]any{"prompt": []string{"a", "b"}, "stream": true}); status != 400 {
		t.Errorf("a list of prompts streamed: %d %v", status, body)
	}
}

// TestTopLogprobs: top_logprobs N (chat) and logprobs N (completions) give
// the N most likely tokens at each position, best first, the sampled
// token's log-prob among them or below the last, in the responses and the
// streams alike; N over 20 is refused with 400.
func TestTopLogprobs(t *testing.T) {
	url, _, _ := startServer(t, testConfig(), Options{})
	msgs := []any{map[string]any{"role": "user", "content": "Say 4:"}}
	type entry struct {
		Token       string  `json:"token"`
		Logprob     float64 `json:"logprob"`
		Bytes       []int   `json:"bytes"`
		TopLogprobs []entry `json:"top_logprobs"`
	}
	checkEntry := func(where string, e entry, n int) bool {
		if len(e.TopLogprobs) != n {
			t.Fatalf("%s: %d top_logprobs, want %d: %+v", where, len(e.TopLogprobs), n, e)
		}
		found := false
		for k, a := range e.TopLogprobs {
			if k > 0 && a.Logprob > e.TopLogprobs[k-1].Logprob {
				t.Fatalf("%s: top_logprobs not sorted: %+v", where, e.TopLogprobs)
			}
			if a.Logprob == e.Logprob && a.Token == e.Token { // bytes: the sampled token's are its text's (valid UTF-8), the alternatives' raw
				found = true
			}
		}
		if !found && e.Logprob > e.TopLogprobs[n-1].Logprob {
			t.Fatalf("%s: sampled token %q (%v) is likelier than the last alternative but not listed: %+v", where, e.Token, e.Logprob, e.TopLogprobs)
		}
		return found
	}
	for _, n := range []int{2, 5, 20} {
		req := map[string]any{"messages": msgs, "n": 2, "max_tokens": 12, "seed": 1, "temperature": 1, "logprobs": true, "top_logprobs": n}
		b, _ := json.Marshal(req)
		resp, err := http.Post(url+"/chat/completions", "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		var whole struct {
			Choices []struct {
				Index    int `json:"index"`
				Logprobs struct {
					Content []entry `json:"content"`
				} `json:"logprobs"`
			} `json:"choices"`
		}
		err = json.NewDecoder(resp.Body).Decode(&whole)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || len(whole.Choices) != 2 {
			t.Fatalf("top_logprobs %d: status %d, %v", n, resp.StatusCode, err)
		}
		found, total := 0, 0
		for _, c := range whole.Choices {
			for i, e := range c.Logprobs.Content {
				total++
				if checkEntry(fmt.Sprintf("top_logprobs %d choice %d token %d", n, c.Index, i), e, n) {
					found++
				}
			}
		}
		if found == 0 || total == 0 {
			t.Fatalf("top_logprobs %d: the sampled token among its alternatives at none of %d positions", n, total)
		}

		// Streamed: the same alternatives, in the deltas.
		req["stream"] = true
		b, _ = json.Marshal(req)
		sresp, err := http.Post(url+"/chat/completions", "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		streamed := map[int][]entry{}
		sc := bufio.NewScanner(sresp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok || data == "[DONE]" {
				continue
			}
			var chunk struct {
				Choices []struct {
					Index    int `json:"index"`
					Logprobs *struct {
						Content []entry `json:"content"`
					} `json:"logprobs"`
				} `json:"choices"`
			}
			if err := json.Unmarshal([]byte(data), &chunk); err != nil {
				t.Fatalf("chunk %s: %v", data, err)
			}
			for _, c := range chunk.Choices {
				if c.Logprobs != nil {
					streamed[c.Index] = append(streamed[c.Index], c.Logprobs.Content...)
				}
			}
		}
		sresp.Body.Close()
		// The requests are batched differently, so the logits may round
		// differently (1e-7 here): the same alternatives' log-probs, sorted,
		// within 1e-4.
		for _, c := range whole.Choices {
			got, want := streamed[c.Index], c.Logprobs.Content
			if len(got) != len(want) {
				t.Fatalf("top_logprobs %d choice %d: %d tokens streamed, %d whole", n, c.Index, len(got), len(want))
			}
			for i := range got {
				checkEntry(fmt.Sprintf("streamed, top_logprobs %d choice %d token %d", n, c.Index, i), got[i], n)
				for k := range n {
					if d := got[i].TopLogprobs[k].Logprob - want[i].TopLogprobs[k].Logprob; math.Abs(d) > 1e-4 {
						t.Fatalf("top_logprobs %d choice %d token %d: streamed %+v, whole %+v", n, c.Index, i, got[i].TopLogprobs, want[i].TopLogprobs)
					}
				}
			}
		}
	}

	// Completions: top_logprobs maps token text to log-prob, N per position
	// (fewer only where two tokens share a text).
	for _, stream := range []bool{false, true} {
		req := map[string]any{"prompt": "Say 4:", "max_tokens": 10, "seed": 2, "temperature": 1, "logprobs": 3, "stream": stream}
		b, _ := json.Marshal(req)
		resp, err := http.Post(url+"/completions", "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		var tops []map[string]float64
		var lps []float64
		var toks []string
		add := func(raw []byte) {
			var body struct {
				Choices []struct {
					Logprobs *struct {
						Tokens        []string             `json:"tokens"`
						TokenLogprobs []float64            `json:"token_logprobs"`
						TopLogprobs   []map[string]float64 `json:"top_logprobs"`
					} `json:"logprobs"`
				} `json:"choices"`
			}
			if err := json.Unmarshal(raw, &body); err != nil {
				t.Fatalf("%s: %v", raw, err)
			}
			for _, c := range body.Choices {
				if c.Logprobs != nil {
					tops, lps, toks = append(tops, c.Logprobs.TopLogprobs...), append(lps, c.Logprobs.TokenLogprobs...), append(toks, c.Logprobs.Tokens...)
				}
			}
		}
		if stream {
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok && data != "[DONE]" {
					add([]byte(data))
				}
			}
		} else {
			raw, _ := io.ReadAll(resp.Body)
			add(raw)
		}
		resp.Body.Close()
		if len(tops) == 0 || len(tops) != len(lps) {
			t.Fatalf("stream %v: %d top_logprobs for %d tokens", stream, len(tops), len(lps))
		}
		full := 0
		for i, m := range tops {
			if len(m) == 0 || len(m) > 3 {
				t.Fatalf("stream %v token %d: %d top_logprobs, want 3: %v", stream, i, len(m), m)
			}
			if len(m) == 3 {
				full++
			}
			least := 0.0
			for _, lp := range m {
				least = min(least, lp)
			}
			if lp, ok := m[toks[i]]; ok && lp < lps[i] || !ok && lps[i] > least {
				t.Fatalf("stream %v token %d %q (%v): top_logprobs %v", stream, i, toks[i], lps[i], m)
			}
		}
		if full < len(tops)/2 {
			t.Fatalf("stream %v: only %d of %d positions have 3 top_logprobs", stream, full, len(tops))
		}
	}

	for _, c := range []struct {
		path string
		body map[string]any
	}{
		{"/chat/completions", map[string]any{"messages": msgs, "logprobs": true, "top_logprobs": 21}},
		{"/completions", map[string]any{"prompt": "a", "logprobs": 21}},
		{"/completions", map[string]any{"prompt": "a", "logprobs": 21, "stream": true}},
	} {
		status, body := post(t, url+c.path, c.body)
		if status != 400 || !strings.Contains(fmt.Sprint(body), "want 0..20") {
			t.Errorf("%s %v: %d %v, want 400 naming the limit", c.path, c.body, status, body)
		}
	}
}
