package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/pipeline"
	"github.com/confclip/confclip/rollout"
)

// Client makes an OpenAI-compatible server (vLLM, llama.cpp's server,
// SGLang, ollama, confclip serve) a rollout source
// (pipeline.RolloutOptions.Source): one request per prompt with n = the
// group size, the choices becoming the group's samples.
//
// Each request asks for log-probs (logprobs, return_tokens_as_token_ids as
// vLLM names it) and sends the seed and the prompt's id (prompt_id), which
// confclip serve uses to sample exactly as a local rollout; servers that do
// not know a field ignore it. Records get the log-probs and token ids the
// server returns; a record without them is teacher-forced at scoring time
// (score --model).
type Client struct {
	// Endpoint is the API's base URL, e.g. http://127.0.0.1:8080/v1 (a URL
	// without /v1 gets it).
	Endpoint string
	// ModelName is the model requests ask for; "" = the first that
	// /v1/models lists.
	ModelName string
	APIKey    string
	// Concurrency is the requests in flight; 0 = 8.
	Concurrency int
	// Retries is how often a request that failed on the server's side (5xx,
	// 429, a broken connection) is tried again, with a growing pause; 0 = 3.
	Retries int
	// Plain sends only fields of OpenAI's own API, for servers that refuse
	// others (api.openai.com): no prompt_id, no return_tokens_as_token_ids,
	// so the records have no token ids.
	Plain bool
	// HTTP makes the requests; nil = one with a connect timeout, TCP
	// keepalive and TCP_USER_TIMEOUT (net.go). Every request also has a
	// limit on each phase (Client.send).
	HTTP *http.Client

	// adapterSHA, when set (by Pool), pins the requests to the adapter of
	// this sha256 (the Confclip-Adapter-Sha256 header): a confclip serve
	// with another answers 409.
	adapterSHA string
}

// Model names the endpoint and model, for the rollout file's provenance.
func (c *Client) Model() string { return c.base() + " model " + c.ModelName }

func (c *Client) base() string {
	b := strings.TrimRight(c.Endpoint, "/")
	if !strings.HasSuffix(b, "/v1") {
		b += "/v1"
	}
	return b
}

func (c *Client) http() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return netClient
}

// Resolve asks the server for its first model when ModelName is not set.
func (c *Client) Resolve(ctx context.Context) error {
	if c.ModelName != "" {
		return nil
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	b, status, err := c.do(ctx, http.MethodGet, "/models", nil)
	if err != nil {
		return err
	}
	if status != http.StatusOK {
		return fmt.Errorf("%s/models: status %d: %s", c.base(), status, short(b))
	}
	if err := json.Unmarshal(b, &list); err != nil || len(list.Data) == 0 {
		return fmt.Errorf("%s/models lists no model (%s): give the model's name", c.base(), short(b))
	}
	c.ModelName = list.Data[0].ID
	return nil
}

// Generate implements pipeline.RolloutSource.
func (c *Client) Generate(ctx context.Context, cfg pipeline.Config, prompts []dataset.Prompt, emit func([]dataset.Rollout) error) (rollout.Stats, error) {
	start := time.Now()
	var st rollout.Stats
	if err := c.Resolve(ctx); err != nil {
		return st, err
	}
	workers := c.Concurrency
	if workers <= 0 {
		workers = 8
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex // emit, st
	var firstErr error
	work := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range work {
				g, promptTokens, err := c.group(ctx, cfg, &prompts[i])
				mu.Lock()
				switch {
				case err == nil:
					if e := emit(g); e != nil && firstErr == nil {
						firstErr = e
						cancel()
					}
					st.Groups++
					st.Records += len(g)
					st.PromptTokens += promptTokens
					for _, r := range g {
						st.Tokens += max(len(r.Tokens), len(r.Logprobs))
					}
				case ctx.Err() != nil:
				default:
					var re requestError
					if errors.As(err, &re) {
						st.Errors = append(st.Errors, rollout.RecordError{Index: i, ID: prompts[i].ID, Reason: err.Error()})
					} else if firstErr == nil {
						firstErr = err
						cancel()
					}
				}
				mu.Unlock()
			}
		})
	}
	for i := range prompts {
		select {
		case work <- i:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(work)
	wg.Wait()
	st.Elapsed = time.Since(start)
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return st, firstErr
}

// requestError is a request the server refused (4xx): that prompt fails,
// the others go on.
type requestError struct{ msg string }

func (e requestError) Error() string { return e.msg }

// group asks for one prompt's samples.
func (c *Client) group(ctx context.Context, cfg pipeline.Config, p *dataset.Prompt) ([]dataset.Rollout, int, error) {
	r := cfg.Rollout
	path, body, err := c.request(r, p)
	if err != nil {
		return nil, 0, err
	}
	b, status, err := c.post(ctx, path, body)
	switch {
	case err != nil:
		return nil, 0, fmt.Errorf("prompt %q: %w", p.ID, err)
	case status == http.StatusConflict && c.adapterSHA != "":
		return nil, 0, fmt.Errorf("prompt %q: %s%s: the worker has another adapter: %s", p.ID, c.base(), path, short(b))
	case status >= 400 && status < 500 && status != http.StatusTooManyRequests:
		return nil, 0, requestError{fmt.Sprintf("%s%s: status %d: %s", c.base(), path, status, short(b))}
	case status != http.StatusOK:
		return nil, 0, fmt.Errorf("prompt %q: %s%s: status %d: %s", p.ID, c.base(), path, status, short(b))
	}
	out, err := c.rollouts(b, path, r, p)
	if err != nil {
		return nil, 0, err
	}
	var u struct {
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(b, &u); err != nil {
		return nil, 0, fmt.Errorf("the server's usage: %w", err)
	}
	return out, u.Usage.PromptTokens, nil
}

// request is the completions (or chat completions) request of a prompt's
// group under the [rollout] settings.
func (c *Client) request(r rollout.Options, p *dataset.Prompt) (path string, body map[string]any, err error) {
	body = map[string]any{"model": c.ModelName, "n": r.Group, "temperature": r.Temperature, "seed": r.Seed}
	if r.MaxTokens > 0 { // else the server's default: the context left
		body["max_tokens"] = r.MaxTokens
	}
	if !c.Plain {
		body["prompt_id"], body["return_tokens_as_token_ids"] = p.ID, true
	}
	if r.TopP > 0 && r.TopP < 1 {
		body["top_p"] = r.TopP
	}
	if r.TopK > 0 || r.MinP > 0 {
		if c.Plain {
			return "", nil, fmt.Errorf("top_k and min_p are not fields of OpenAI's API: unset them to sample with --endpoint-plain")
		}
		if r.TopK > 0 {
			body["top_k"] = r.TopK
		}
		if r.MinP > 0 {
			body["min_p"] = r.MinP
		}
	}
	if len(r.Stop) > 0 {
		body["stop"] = r.Stop
	}
	path = "/completions"
	if len(p.Messages) > 0 || r.Chat {
		path = "/chat/completions"
		msgs := p.Messages
		if len(msgs) == 0 {
			msgs = []dataset.Message{{Role: "user", Content: p.Prompt}}
		}
		body["messages"], body["logprobs"] = msgs, true
	} else {
		body["prompt"], body["logprobs"] = p.Prompt, 1
	}
	return path, body, nil
}

// post sends the request, again on a transport error, 429 or 5xx (up to
// Retries times, backing off), and returns the last answer.
func (c *Client) post(ctx context.Context, path string, body map[string]any) (b []byte, status int, err error) {
	retries := c.Retries
	if retries <= 0 {
		retries = 3
	}
	for try := 0; ; try++ {
		b, status, err = c.do(ctx, http.MethodPost, path, body)
		retry := err != nil || status == http.StatusTooManyRequests || status >= 500
		if !retry || try == retries || ctx.Err() != nil {
			return b, status, err
		}
		select {
		case <-time.After(time.Duration(250<<try) * time.Millisecond):
		case <-ctx.Done():
		}
	}
}

// rollouts reads a response into the prompt's group, sample by sample.
func (c *Client) rollouts(b []byte, path string, r rollout.Options, p *dataset.Prompt) ([]dataset.Rollout, error) {
	rec, err := dataset.ParseOpenAILine(b)
	if err != nil {
		return nil, requestError{fmt.Sprintf("%s%s: %v", c.base(), path, err)}
	}
	rec.PromptID, rec.Prompt, rec.Messages, rec.Answer, rec.Verifier = p.ID, p.Prompt, p.Messages, p.Answer, p.Verifier
	g, err := rec.Rollouts()
	if err != nil {
		return nil, requestError{fmt.Sprintf("%s%s: %v", c.base(), path, err)}
	}
	if len(g) != r.Group {
		return nil, requestError{fmt.Sprintf("%s%s: %d choices for n = %d", c.base(), path, len(g), r.Group)}
	}
	out := make([]dataset.Rollout, r.Group)
	for _, x := range g {
		if x.Sample < 0 || x.Sample >= r.Group {
			return nil, requestError{fmt.Sprintf("%s%s: choice index %d for n = %d", c.base(), path, x.Sample, r.Group)}
		}
		x.Seed = r.Seed
		out[x.Sample] = x
	}
	return out, nil
}

// do sends one request and reads the whole answer.
func (c *Client) do(ctx context.Context, method, path string, body any) ([]byte, int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base()+path, rd)
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.adapterSHA != "" && method == http.MethodPost {
		req.Header.Set(AdapterSHA256Header, c.adapterSHA)
	}
	if c.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.APIKey)
	}
	return c.send(ctx, req, 0, 256<<20)
}

// short is the start of a response body, for an error message.
func short(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}
