// Package server is confclip serve: an OpenAI-compatible HTTP API
// (completions, chat completions with log-probs and streaming, models,
// health) over the rollout engine, and the client that makes any
// OpenAI-compatible server a rollout source.
//
// Requests are batched continuously: one engine runs (rollout.Engine.Serve)
// and takes each request's prompt into the running batch as soon as it
// arrives and a sequence slot is free. Requests whose sampling settings
// differ from the running batch's (temperature, top_p, top_k, min_p,
// max_tokens, stop, seed, n) wait until it drains, which it does once such a
// request has waited Options.SwitchAfter; requests with the same settings
// share the batch.
package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/pipeline"
	"github.com/confclip/confclip/rollout"
)

// Options configure a Server.
type Options struct {
	// Config gives the defaults of every request ([rollout]: max_tokens,
	// temperature, ..., seed, parallel) and the context of one sequence
	// ([model] ctx): the engine holds Parallel sequences of Ctx tokens.
	Config pipeline.Config
	// ModelID is the model's name in /v1/models and requests; "" = the
	// model file's name without .gguf.
	ModelID string
	// MaxBodyBytes bounds a request body; 0 = 1 MiB. More gets 413.
	MaxBodyBytes int64
	// MaxRequests bounds the requests queued or running; 0 = 256. More get
	// 429.
	MaxRequests int
	// MaxN bounds n; 0 = 64.
	MaxN int
	// SwitchAfter is how long a request whose settings differ from the
	// running batch's waits before the batch stops taking new requests;
	// 0 = 200ms.
	SwitchAfter time.Duration
	// AdapterDir, when set, lets POST /v1/adapters load a LoRA adapter
	// (GGUF) from this folder; unset, the endpoint answers 403.
	AdapterDir string
}

// Server serves one model. Make it with New, serve Handler, and Close it
// after the HTTP server has shut down.
type Server struct {
	m       *pipeline.Model
	o       Options
	seqCtx  int
	created int64

	mu      sync.Mutex
	wake    *sync.Cond
	queue   []*job
	running map[string]*job
	ctrl    []func()
	closing bool
	done    chan struct{}
	eng     *rollout.Engine
	engKey  string

	inflight atomic.Int64
	nextID   atomic.Uint64
}

// job is one prompt of a request (a request with several prompts makes
// several jobs).
type job struct {
	key    string // the engine settings, as text
	opts   rollout.Options
	prompt dataset.Prompt
	token  string // routes the engine's group back (carried in Answer)
	enq    time.Time
	ctx    context.Context
	done   chan jobResult // buffered, 1
}

type jobResult struct {
	recs []dataset.Rollout
	err  *apiError
}

// New starts a server's scheduler on an open model.
func New(m *pipeline.Model, o Options) (*Server, error) {
	if o.ModelID == "" {
		o.ModelID = strings.TrimSuffix(filepath.Base(m.Path()), ".gguf")
	}
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = 1 << 20
	}
	if o.MaxRequests == 0 {
		o.MaxRequests = 256
	}
	if o.MaxN == 0 {
		o.MaxN = 64
	}
	if o.SwitchAfter == 0 {
		o.SwitchAfter = 200 * time.Millisecond
	}
	if o.Config.Rollout.Parallel == 0 {
		o.Config.Rollout.Parallel = 16
	}
	s := &Server{m: m, o: o, seqCtx: o.Config.Model.Ctx, created: time.Now().Unix(), running: map[string]*job{}, done: make(chan struct{})}
	if s.seqCtx <= 0 {
		return nil, fmt.Errorf("serve: model.ctx %d: want the tokens of one sequence (prompt + completion)", s.seqCtx)
	}
	s.wake = sync.NewCond(&s.mu)
	go s.loop()
	return s, nil
}

// ModelID is the name requests give the model.
func (s *Server) ModelID() string { return s.o.ModelID }

// Handler is the HTTP API.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/completions", s.limit(s.completions))
	mux.HandleFunc("/v1/chat/completions", s.limit(s.chat))
	mux.HandleFunc("/v1/models", s.models)
	mux.HandleFunc("/v1/adapters", s.adapters)
	mux.HandleFunc("/health", s.health)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &apiError{Status: http.StatusNotFound, Type: "invalid_request_error", Message: "no endpoint " + r.URL.Path +
			" (there are /v1/completions, /v1/chat/completions, /v1/models, /v1/adapters and /health)"})
	})
	return mux
}

// limit refuses requests beyond MaxRequests (429) and while closing (503).
func (s *Server) limit(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if n := s.inflight.Add(1); n > int64(s.o.MaxRequests) {
			s.inflight.Add(-1)
			w.Header().Set("Retry-After", "1")
			writeError(w, &apiError{Status: http.StatusTooManyRequests, Type: "rate_limit_error",
				Message: fmt.Sprintf("%d requests are queued or running, the most this server takes: retry later", s.o.MaxRequests)})
			return
		}
		defer s.inflight.Add(-1)
		h(w, r)
	}
}

// Close stops the scheduler once the queued and running requests are done
// (stop the HTTP server first, so that no new ones come).
func (s *Server) Close() {
	s.mu.Lock()
	s.closing = true
	s.wake.Broadcast()
	s.mu.Unlock()
	<-s.done
	if s.eng != nil {
		s.m.ReleaseEngine(s.eng)
		s.eng = nil
	}
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	closing, queued, running := s.closing, len(s.queue), len(s.running)
	s.mu.Unlock()
	st := map[string]any{"status": "ok", "model": s.o.ModelID, "adapter": s.m.AdapterPath(), "queued": queued, "running": running}
	if closing {
		st["status"] = "shutting down"
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		json.NewEncoder(w).Encode(st)
		return
	}
	writeJSON(w, st)
}

func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, map[string]any{"object": "list", "data": []map[string]any{
		{"id": s.o.ModelID, "object": "model", "created": s.created, "owned_by": "confclip", "max_model_len": s.seqCtx},
	}})
}

// adapters loads (or switches to) a LoRA adapter from AdapterDir:
// POST {"path": "name.gguf"}. The running batch finishes first.
func (s *Server) adapters(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		writeJSON(w, map[string]any{"adapter": s.m.AdapterPath()})
		return
	}
	var req struct {
		Path string `json:"path"`
	}
	if e := decode(r, s.o.MaxBodyBytes, &req); e != nil {
		writeError(w, e)
		return
	}
	if s.o.AdapterDir == "" {
		writeError(w, &apiError{Status: http.StatusForbidden, Type: "permission_error", Message: "loading adapters is off: start the server with --adapter-dir"})
		return
	}
	if req.Path == "" || filepath.IsAbs(req.Path) || !filepath.IsLocal(req.Path) {
		writeError(w, badRequest("path", "path %q: want a file name inside the server's adapter folder", req.Path))
		return
	}
	path := filepath.Join(s.o.AdapterDir, req.Path)
	if _, err := os.Stat(path); err != nil {
		writeError(w, &apiError{Status: http.StatusNotFound, Type: "invalid_request_error", Param: "path", Message: fmt.Sprintf("adapter %q: %v", req.Path, err)})
		return
	}
	res := make(chan error, 1)
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		writeError(w, &apiError{Status: http.StatusServiceUnavailable, Type: "server_error", Message: "the server is shutting down"})
		return
	}
	s.ctrl = append(s.ctrl, func() { res <- s.m.LoadAdapter(path) })
	s.wake.Broadcast()
	s.mu.Unlock()
	if err := <-res; err != nil {
		writeError(w, badRequest("path", "adapter %q: %v", req.Path, err))
		return
	}
	writeJSON(w, map[string]any{"adapter": path})
}

// loop runs the engine for the oldest queued request's settings, and any
// control operation (an adapter switch) between batches.
func (s *Server) loop() {
	defer close(s.done)
	for {
		s.mu.Lock()
		for len(s.queue) == 0 && len(s.ctrl) == 0 && !s.closing {
			s.wake.Wait()
		}
		if len(s.ctrl) > 0 {
			f := s.ctrl[0]
			s.ctrl = s.ctrl[1:]
			s.mu.Unlock()
			f()
			continue
		}
		if len(s.queue) == 0 { // closing, nothing left
			s.mu.Unlock()
			return
		}
		first := s.queue[0]
		s.mu.Unlock()
		if err := s.serve(first.key, first.opts); err != nil {
			s.failRunning(&apiError{Status: http.StatusInternalServerError, Type: "server_error", Message: err.Error()})
		}
	}
}

// serve runs the engine for one set of settings until no request with them
// is left, or others have waited long enough.
func (s *Server) serve(key string, opts rollout.Options) error {
	if s.eng == nil || s.engKey != key {
		if s.eng != nil {
			s.m.ReleaseEngine(s.eng)
			s.eng = nil
		}
		opts.NCtx = opts.Parallel * s.seqCtx
		e, err := s.m.NewEngine(opts)
		if err != nil {
			s.failKey(key, &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Message: err.Error()})
			return nil
		}
		s.eng, s.engKey = e, key
	}
	next := func(wait bool) []dataset.Prompt {
		s.mu.Lock()
		defer s.mu.Unlock()
		for {
			var ps []dataset.Prompt
			if !s.switchDue(key) {
				kept := s.queue[:0]
				for _, j := range s.queue {
					switch {
					case j.key != key:
						kept = append(kept, j)
					case j.ctx.Err() != nil: // the client left before it started
						j.done <- jobResult{err: &apiError{Status: 499, Type: "invalid_request_error", Message: "request cancelled"}}
					default:
						s.running[j.token] = j
						ps = append(ps, j.prompt)
					}
				}
				clear(s.queue[len(kept):])
				s.queue = kept
			}
			if len(ps) > 0 || !wait {
				return ps
			}
			if len(s.running) == 0 && (len(s.queue) > 0 || len(s.ctrl) > 0 || s.closing) {
				return nil // drained: let the loop switch, or stop
			}
			s.wake.Wait()
		}
	}
	emit := func(g []dataset.Rollout) error {
		s.finish(g[0].Answer, jobResult{recs: g})
		return nil
	}
	reject := func(p *dataset.Prompt, reason string) {
		s.finish(p.Answer, jobResult{err: badRequest("", "%s", reason)})
	}
	_, err := s.eng.Serve(context.Background(), next, emit, reject)
	if err != nil {
		// A failed decode leaves the context in an unknown state.
		s.m.ReleaseEngine(s.eng)
		s.eng = nil
	}
	return err
}

// switchDue reports whether the running batch should stop taking requests:
// an adapter switch waits, or a request with other settings has waited
// SwitchAfter. Called with mu held.
func (s *Server) switchDue(key string) bool {
	if len(s.ctrl) > 0 {
		return true
	}
	for _, j := range s.queue {
		if j.key != key {
			return time.Since(j.enq) >= s.o.SwitchAfter
		}
	}
	return false
}

func (s *Server) finish(token string, r jobResult) {
	s.mu.Lock()
	j := s.running[token]
	delete(s.running, token)
	s.wake.Broadcast()
	s.mu.Unlock()
	if j != nil {
		j.done <- r
	}
}

func (s *Server) failRunning(e *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for t, j := range s.running {
		j.done <- jobResult{err: e}
		delete(s.running, t)
	}
}

func (s *Server) failKey(key string, e *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	kept := s.queue[:0]
	for _, j := range s.queue {
		if j.key == key {
			j.done <- jobResult{err: e}
		} else {
			kept = append(kept, j)
		}
	}
	s.queue = kept
}

// submit queues the prompts of one request with its engine settings and
// waits for their groups, in order.
func (s *Server) submit(ctx context.Context, opts rollout.Options, prompts []dataset.Prompt) ([][]dataset.Rollout, *apiError) {
	kb, _ := json.Marshal(opts)
	key := string(kb)
	jobs := make([]*job, len(prompts))
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return nil, &apiError{Status: http.StatusServiceUnavailable, Type: "server_error", Message: "the server is shutting down"}
	}
	for i, p := range prompts {
		j := &job{key: key, opts: opts, prompt: p, enq: time.Now(), ctx: ctx, done: make(chan jobResult, 1)}
		j.token = "req-" + strconv.FormatUint(s.nextID.Add(1), 36)
		// The engine copies a prompt's answer into its records; a served
		// prompt has none, so it carries the job's token back.
		j.prompt.Answer = j.token
		jobs[i] = j
		s.queue = append(s.queue, j)
	}
	s.wake.Broadcast()
	s.mu.Unlock()
	out := make([][]dataset.Rollout, len(jobs))
	var first *apiError
	for i, j := range jobs {
		r := <-j.done // every job ends: the engine finishes what it admitted
		if r.err != nil && first == nil {
			first = r.err
		}
		for k := range r.recs {
			r.recs[k].Answer = ""
		}
		out[i] = r.recs
	}
	return out, first
}

// engineOptions are a request's settings over the server's defaults, and
// the prompt id that keys its random streams.
func (s *Server) engineOptions(req sampling, maxTokens *int, chat bool) (rollout.Options, string, *apiError) {
	if e := req.check(&s.o); e != nil {
		return rollout.Options{}, "", e
	}
	if req.Model != "" && req.Model != s.o.ModelID {
		return rollout.Options{}, "", &apiError{Status: http.StatusNotFound, Type: "invalid_request_error", Param: "model", Code: "model_not_found",
			Message: fmt.Sprintf("model %q does not exist: this server serves %q", req.Model, s.o.ModelID)}
	}
	cfg := s.o.Config
	r := &cfg.Rollout
	r.Group = 1
	if req.N != nil {
		r.Group = *req.N
	}
	if req.Temperature != nil {
		r.Temperature = *req.Temperature
	}
	if req.TopP != nil {
		r.TopP = *req.TopP
	}
	if req.TopK != nil {
		r.TopK = max(*req.TopK, 0)
	}
	if req.MinP != nil {
		r.MinP = *req.MinP
	}
	if maxTokens == nil {
		maxTokens = req.MaxTokens
	}
	if maxTokens != nil {
		if *maxTokens < 1 {
			return rollout.Options{}, "", badRequest("max_tokens", "max_tokens = %d: want 1 or more", *maxTokens)
		}
		r.MaxTokens = *maxTokens
	}
	if r.MaxTokens >= s.seqCtx {
		return rollout.Options{}, "", badRequest("max_tokens", "max_tokens = %d is beyond the context: a sequence holds %d tokens, prompt and completion", r.MaxTokens, s.seqCtx)
	}
	stops, e := req.stops()
	if e != nil {
		return rollout.Options{}, "", e
	}
	r.Stop = stops
	// With a seed (or a prompt id) the samples are a function of the
	// request, as in a local rollout: (seed, prompt id, sample). Without,
	// each request gets its own prompt id, so requests differ.
	id := ""
	if req.Seed != nil {
		r.Seed = *req.Seed
	} else {
		id = "req-" + strconv.FormatUint(s.nextID.Add(1), 36)
	}
	if req.PromptID != nil {
		id = *req.PromptID
	}
	r.Chat = chat
	o := pipeline.EngineOptions(cfg)
	o.NoTiming = true
	o.Parallel = max(cfg.Rollout.Parallel, 1)
	return o, id, nil
}
