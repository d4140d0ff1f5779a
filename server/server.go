// Package server is confclip serve: an OpenAI-compatible HTTP API
// (completions, chat completions with log-probs and streaming, models,
// health) over the rollout engine, and the client that makes any
// OpenAI-compatible server a rollout source.
//
// Requests are batched continuously: one engine runs (rollout.Engine.Serve)
// and takes each request's prompt into the running batch as soon as it
// arrives and a sequence slot is free, with the request's own settings
// (n, max_tokens, temperature, top_p, top_k, min_p, stop, seed). Only an
// adapter switch drains the batch.
package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
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
	// AdapterDir, when set, lets POST /v1/adapters load a LoRA adapter
	// (GGUF) from this folder; unset, the endpoint answers 403.
	AdapterDir string
	// BodyTimeout bounds the reading of a request's body, which is read
	// whole before the request takes a slot; 0 = 10 s. Slower gets 408.
	// An adapter upload may take longer, but each piece of it must come
	// within BodyTimeout.
	BodyTimeout time.Duration
	// MaxAdapterBytes bounds an adapter uploaded with PUT
	// /v1/adapters/NAME (upload.go); 0 = 1 GiB. More gets 413.
	MaxAdapterBytes int64
	// AccessLog, when set, gets one line per request served by Serve
	// (serve.go); Log gets Serve's notes on shutting down. Nil discards.
	AccessLog, Log io.Writer
	// ShutdownTimeout bounds how long Serve lets the requests in flight
	// finish once its context is done; 0 = 5 minutes.
	ShutdownTimeout time.Duration
}

// Server serves one model. Make it with New and run it with Serve (which
// owns the listener and the order of a graceful shutdown); or serve Handler
// yourself and Close it after the HTTP server has shut down.
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

	inflight atomic.Int64
	// reads is cancelled when the HTTP server starts shutting down: bodies
	// still arriving are cut off rather than holding the shutdown.
	reads       context.Context
	cancelReads context.CancelFunc
	nextID      atomic.Uint64
	streams     atomic.Int64 // streamed jobs queued or running

	adapterSHA atomic.Pointer[string] // the loaded adapter's sha256 (noteAdapter)
}

// job is one prompt of a request (a request with several prompts makes
// several jobs).
type job struct {
	opts   rollout.Options // the request's settings (Group, MaxTokens, Sampling, Seed, Stop)
	prompt dataset.Prompt
	token  string // routes the engine's group back (carried in Answer)
	ctx    context.Context
	done   chan jobResult // buffered, 1
	stream *stream        // a streamed request's text so far, else nil
}

// errCancelled ends a request whose client left; nobody reads it but the
// access log (499, nginx's "client closed request").
var errCancelled = &apiError{Status: 499, Type: "invalid_request_error", Message: "request cancelled"}

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
	if o.BodyTimeout == 0 {
		o.BodyTimeout = 10 * time.Second
	}
	if o.Config.Rollout.Parallel == 0 {
		o.Config.Rollout.Parallel = 16
	}
	s := &Server{m: m, o: o, seqCtx: o.Config.Model.Ctx, created: time.Now().Unix(), running: map[string]*job{}, done: make(chan struct{})}
	if s.seqCtx <= 0 {
		return nil, fmt.Errorf("serve: model.ctx %d: want the tokens of one sequence (prompt + completion)", s.seqCtx)
	}
	s.wake = sync.NewCond(&s.mu)
	s.reads, s.cancelReads = context.WithCancel(context.Background())
	s.noteAdapter()
	go s.loop()
	return s, nil
}

// HTTPServer is an http.Server for Handler with per-connection timeouts:
// the headers within 10 s, an idle keep-alive connection closed after
// 60 s, and bodies still arriving cut off when Shutdown starts (so that
// slow clients cannot hold it up). Streamed responses have no write
// timeout.
func (s *Server) HTTPServer() *http.Server {
	hs := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 60 * time.Second}
	hs.RegisterOnShutdown(s.cancelReads)
	return hs
}

// ModelID is the name requests give the model.
func (s *Server) ModelID() string { return s.o.ModelID }

// Handler is the HTTP API.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/completions", s.limit(pinAdapter(s.completions)))
	mux.HandleFunc("/v1/chat/completions", s.limit(pinAdapter(s.chat)))
	mux.HandleFunc("/v1/models", s.models)
	mux.HandleFunc("/v1/adapters", s.adapters)
	mux.HandleFunc("PUT /v1/adapters/{name}", s.upload)
	mux.HandleFunc("/health", s.health)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &apiError{Status: http.StatusNotFound, Type: "invalid_request_error", Message: "no endpoint " + r.URL.Path +
			" (there are /v1/completions, /v1/chat/completions, /v1/models, /v1/adapters and /health)"})
	})
	return mux
}

// limit reads the body (readBody), then refuses requests beyond
// MaxRequests (429) and while closing (503).
func (s *Server) limit(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if e := s.readBody(w, r); e != nil {
			writeError(w, e)
			return
		}
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

// readBody reads a request's body whole, under BodyTimeout and until
// shutdown starts, before the request takes a slot: a client sending a
// byte at a time holds a connection, never a slot. At most MaxBodyBytes+1
// bytes are kept (decode answers 413 beyond MaxBodyBytes).
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) *apiError {
	if r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(s.o.BodyTimeout)) // not supported by every ResponseWriter: then unbounded
	stop := context.AfterFunc(s.reads, func() { rc.SetReadDeadline(time.Now()) })
	b, err := io.ReadAll(io.LimitReader(r.Body, s.o.MaxBodyBytes+1))
	stop()
	if err != nil {
		// The deadline stays: net/http's drain of the unread body after
		// the answer must not wait for the slow client either.
		w.Header().Set("Connection", "close")
		if s.reads.Err() != nil {
			return &apiError{Status: http.StatusServiceUnavailable, Type: "server_error", Message: "the server is shutting down"}
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return &apiError{Status: http.StatusRequestTimeout, Type: "invalid_request_error",
				Message: fmt.Sprintf("the request body did not arrive within %v", s.o.BodyTimeout)}
		}
		return badRequest("", "reading the request body: %v", err)
	}
	rc.SetReadDeadline(time.Time{})
	r.Body = io.NopCloser(bytes.NewReader(b))
	return nil
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
	st := map[string]any{"status": "ok", "model": s.o.ModelID, "adapter": s.m.AdapterPath(), "adapter_sha256": s.loadedAdapterSHA256(),
		"queued": queued, "running": running}
	if closing {
		st["status"] = "shutting down"
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write(marshalLine(st)) // the client left: nobody to tell
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
	path, err := resolveInDir(s.o.AdapterDir, req.Path)
	if err != nil {
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

// loop runs the engine while there are requests, and any control
// operation (an adapter switch) between batches.
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
			s.noteAdapter()
			continue
		}
		if len(s.queue) == 0 { // closing, nothing left
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		if err := s.serve(); err != nil {
			s.failAll(&apiError{Status: http.StatusInternalServerError, Type: "server_error", Message: err.Error()})
		}
	}
}

// serve runs the engine until no request is left and an adapter switch
// waits or the server closes.
func (s *Server) serve() error {
	if s.eng == nil {
		cfg := s.o.Config
		cfg.Rollout.Chat = false // chat requests come as messages
		o := pipeline.EngineOptions(cfg)
		o.Parallel = max(cfg.Rollout.Parallel, 1)
		o.NCtx = o.Parallel * s.seqCtx
		o.NoTiming = true
		e, err := s.m.NewEngine(o)
		if err != nil {
			return err
		}
		s.eng = e
	}
	next := func(wait bool) []rollout.Request {
		s.mu.Lock()
		defer s.mu.Unlock()
		for {
			var reqs []rollout.Request
			if len(s.ctrl) == 0 { // an adapter switch drains the batch first
				for _, j := range s.queue {
					if j.ctx.Err() != nil { // the client left before it started
						s.end(j, jobResult{err: errCancelled})
						continue
					}
					if e := s.adapterConflict(j.ctx); e != nil { // pinned to another adapter (upload.go)
						s.end(j, jobResult{err: e})
						continue
					}
					s.running[j.token] = j
					o := j.opts
					// A client that leaves (its connection closed, or found
					// dead by TCP keepalive) frees its slots at once.
					reqs = append(reqs, rollout.Request{Prompt: j.prompt, Options: &o, Done: j.ctx.Done()})
				}
				clear(s.queue)
				s.queue = s.queue[:0]
			}
			if len(reqs) > 0 || !wait {
				return reqs
			}
			if len(s.running) == 0 && (len(s.ctrl) > 0 || s.closing) {
				return nil // drained: let the loop switch the adapter, or stop
			}
			s.wake.Wait()
		}
	}
	emit := func(g []dataset.Rollout) error {
		s.finish(g[0].Answer, jobResult{recs: g})
		return nil
	}
	reject := func(p *dataset.Prompt, reason string) {
		s.mu.Lock()
		j := s.running[p.Answer]
		s.mu.Unlock()
		if j != nil && j.ctx.Err() != nil { // given up: the client left
			s.finish(p.Answer, jobResult{err: errCancelled})
			return
		}
		s.finish(p.Answer, jobResult{err: badRequest("", "%s", reason)})
	}
	progress := func(p *dataset.Prompt, sample int, raw []byte, offsets []int, lps []float64, tops [][]dataset.TopLogprob) {
		if s.streams.Load() == 0 {
			return
		}
		s.mu.Lock()
		j := s.running[p.Answer]
		s.mu.Unlock()
		if j != nil && j.stream != nil {
			j.stream.update(sample, raw, offsets, lps, tops)
		}
	}
	_, err := s.eng.Serve(context.Background(), next, emit, reject, progress)
	if err != nil {
		// A failed decode leaves the context in an unknown state.
		s.m.ReleaseEngine(s.eng)
		s.eng = nil
	}
	return err
}

func (s *Server) finish(token string, r jobResult) {
	for k := range r.recs {
		r.recs[k].Answer = ""
	}
	s.mu.Lock()
	j := s.running[token]
	delete(s.running, token)
	s.wake.Broadcast()
	s.mu.Unlock()
	if j != nil {
		s.end(j, r)
	}
}

// end hands a job its result.
func (s *Server) end(j *job, r jobResult) {
	if j.stream != nil {
		s.streams.Add(-1)
	}
	j.done <- r
}

// failAll ends every running and queued request with e.
func (s *Server) failAll(e *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for t, j := range s.running {
		s.end(j, jobResult{err: e})
		delete(s.running, t)
	}
	for _, j := range s.queue {
		s.end(j, jobResult{err: e})
	}
	s.queue = s.queue[:0]
}

// submit queues the prompts of one request with its engine settings and
// waits for their groups, in order.
func (s *Server) submit(ctx context.Context, opts rollout.Options, prompts []dataset.Prompt) ([][]dataset.Rollout, *apiError) {
	jobs, e := s.enqueue(ctx, opts, prompts, nil)
	if e != nil {
		return nil, e
	}
	return wait(jobs)
}

// enqueue queues the prompts of one request; st, when set, follows the
// first prompt's text as it is generated.
func (s *Server) enqueue(ctx context.Context, opts rollout.Options, prompts []dataset.Prompt, st *stream) ([]*job, *apiError) {
	jobs := make([]*job, len(prompts))
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return nil, &apiError{Status: http.StatusServiceUnavailable, Type: "server_error", Message: "the server is shutting down"}
	}
	for i, p := range prompts {
		j := &job{opts: opts, prompt: p, ctx: ctx, done: make(chan jobResult, 1)}
		j.token = "req-" + strconv.FormatUint(s.nextID.Add(1), 36)
		// The engine copies a prompt's answer into its records; a served
		// prompt has none, so it carries the job's token back.
		j.prompt.Answer = j.token
		if i == 0 && st != nil {
			j.stream = st
			s.streams.Add(1)
		}
		jobs[i] = j
		s.queue = append(s.queue, j)
	}
	s.wake.Broadcast()
	s.mu.Unlock()
	return jobs, nil
}

// wait waits for every job's group, in order.
func wait(jobs []*job) ([][]dataset.Rollout, *apiError) {
	out := make([][]dataset.Rollout, len(jobs))
	var first *apiError
	for i, j := range jobs {
		r := <-j.done // every job ends: the engine finishes what it admitted
		if r.err != nil && first == nil {
			first = r.err
		}
		out[i] = r.recs
	}
	return out, first
}

// engineOptions are a request's settings over the server's defaults, and
// the prompt id that keys its random streams.
func (s *Server) engineOptions(req sampling, maxTokens *int) (rollout.Options, string, *apiError) {
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
	if r.MaxTokens > 0 && r.MaxTokens >= s.seqCtx {
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
	o := pipeline.EngineOptions(cfg)
	o.NoTiming = true
	o.Parallel = max(cfg.Rollout.Parallel, 1)
	return o, id, nil
}
