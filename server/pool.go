package server

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/pipeline"
	"github.com/confclip/confclip/rollout"
)

// Pool is `run`'s rollout workers (pipeline.RemoteRollouts): several
// OpenAI-compatible servers sharing each step's groups.
//
//   - Each group (one prompt, n = the group size) goes to the usable worker
//     with the shortest queue: its requests queued and running as its
//     GET /health last said (others' as well as ours), plus ours sent since.
//   - A request that fails (a broken connection, 5xx, 429 after the
//     client's retry) or takes longer than Timeout sends its group to
//     another worker, and the worker is left out until its /health answers
//     again. A group the server refuses (4xx) is a bad prompt: listed, not
//     retried.
//   - A worker that holds our requests and has not answered /health for
//     Lost is lost (its host down, a partition that drops packets, a
//     process stopped): its requests are given up at once and their groups
//     go to other workers. With /health read every Poll within
//     HealthTimeout, a lost worker is found within Lost + HealthTimeout +
//     Poll (7.5 s by default) instead of Timeout.
//   - SetAdapter uploads the step's adapter to every confclip serve worker
//     (PUT /v1/adapters/NAME) whose /health reports another; a worker that
//     reports another adapter afterwards (a failed upload, a switch by
//     someone else) gets no group until it reports the step's again.
//   - Each record names its worker (dataset.Rollout.Worker).
type Pool struct {
	Workers []*Client
	// Timeout bounds one group's request on one worker (the wait for its
	// answer, which comes when the group is generated); 0 = 10 minutes.
	Timeout time.Duration
	// HealthTimeout bounds one GET /health, connection included; 0 = 2 s.
	HealthTimeout time.Duration
	// Lost is how long a worker holding our requests may go without
	// answering /health before they are given up; 0 = 5 s.
	Lost time.Duration
	// Poll is how often every worker's /health is read while a step runs;
	// 0 = 500 ms.
	Poll time.Duration
	// Grace is how long a step waits for a worker to come back when none
	// is usable; 0 = 30 s.
	Grace time.Duration
	// Log receives a line for each worker left out and each group retried;
	// nil discards them.
	Log io.Writer

	mu     sync.Mutex
	wake   *sync.Cond
	state  []*worker
	want   string // the sha256 every confclip serve worker must report
	report pipeline.RemoteReport
}

type worker struct {
	c        *Client
	uploads  bool                            // /health reports adapter_sha256: confclip serve
	sha      string                          // the adapter /health reported last
	others   int                             // queued and running requests that are not ours, at the last poll
	inflight int                             // our requests in flight
	down     error                           // the last failure; cleared by a good /health
	lastOK   time.Time                       // its last good /health
	reqs     map[int]context.CancelCauseFunc // our requests in flight, by prompt index
	lost     bool                            // given up since lastOK
	groups   int
	failures int
	refused  string
}

// NewPool makes a pool of the endpoints, each a copy of base (API key,
// concurrency: requests in flight per worker, model name).
func NewPool(endpoints []string, base Client) *Pool {
	p := &Pool{}
	for _, e := range endpoints {
		c := base
		c.Endpoint = e
		if c.Retries == 0 {
			c.Retries = 1 // then another worker: a dead one costs one pause
		}
		p.Workers = append(p.Workers, &c)
	}
	return p
}

// Model implements pipeline.RolloutSource.
func (p *Pool) Model() string {
	names := make([]string, len(p.Workers))
	for i, c := range p.Workers {
		names[i] = c.Model()
	}
	return "workers " + strings.Join(names, ", ")
}

func (p *Pool) init() {
	if p.wake != nil {
		return
	}
	p.wake = sync.NewCond(&p.mu)
	for _, c := range p.Workers {
		p.state = append(p.state, &worker{c: c})
	}
}

func (p *Pool) healthTimeout() time.Duration { return cmp.Or(max(p.HealthTimeout, 0), 2*time.Second) }

func (p *Pool) logf(format string, a ...any) {
	if p.Log != nil {
		fmt.Fprintf(p.Log, "workers: "+format+"\n", a...)
	}
}

// healthOf is what a worker's GET /health says.
type healthOf struct {
	queue   int
	uploads bool
	sha     string
}

// health reads GET /health; the answer must come within limit.
func (c *Client) health(ctx context.Context, limit time.Duration) (healthOf, error) {
	var h healthOf
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	url := strings.TrimSuffix(c.base(), "/v1") + "/health"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return h, err
	}
	if c.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.APIKey)
	}
	b, status, err := c.send(ctx, req, limit, 1<<20)
	if err != nil {
		return h, err
	}
	if status != http.StatusOK {
		return h, fmt.Errorf("%s: status %d: %s", url, status, short(b))
	}
	var st map[string]json.RawMessage
	if json.Unmarshal(b, &st) != nil {
		return h, nil // another server's health page: no queue, no uploads
	}
	// A field that is missing counts as 0 (another server's health page);
	// one that is there must be of its type.
	var q, r int
	for _, f := range []struct {
		key string
		v   any
	}{{"queued", &q}, {"running", &r}, {"adapter_sha256", &h.sha}} {
		if raw, ok := st[f.key]; ok {
			if err := json.Unmarshal(raw, f.v); err != nil {
				return h, fmt.Errorf("%s: health field %q: %w", url, f.key, err)
			}
		}
	}
	h.queue = q + r
	_, h.uploads = st["adapter_sha256"]
	return h, nil
}

// uploadAdapter sends the adapter file as PUT /v1/adapters/NAME; the
// answer, which comes once the server has switched to it, within
// firstByte.
func (c *Client) uploadAdapter(ctx context.Context, path, name, sum string, firstByte time.Duration) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, c.base()+"/adapters/"+name, f)
	if err != nil {
		return err
	}
	req.ContentLength = fi.Size()
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set(AdapterSHA256Header, sum)
	if c.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.APIKey)
	}
	b, status, err := c.send(ctx, req, firstByte, 1<<20)
	if err != nil {
		return err
	}
	if status != http.StatusOK {
		return fmt.Errorf("PUT %s/adapters/%s: status %d: %s", c.base(), name, status, short(b))
	}
	return nil
}

// SetAdapter implements pipeline.RemoteRollouts: every confclip serve
// worker that reports another adapter gets this one (as
// run-SHA256PREFIX.gguf in its --adapter-dir). It fails only when no
// worker is left to sample with.
func (p *Pool) SetAdapter(ctx context.Context, path, sum string) error {
	p.mu.Lock()
	p.init()
	p.want = sum
	p.report = pipeline.RemoteReport{AdapterSHA256: sum}
	p.mu.Unlock()
	name := "run-" + sum[:min(16, len(sum))] + ".gguf"
	var wg sync.WaitGroup
	for _, w := range p.state {
		wg.Go(func() {
			refused := ""
			h, err := w.c.health(ctx, p.healthTimeout())
			if err == nil && h.uploads && h.sha != sum {
				if err = w.c.uploadAdapter(ctx, path, name, sum, p.timeout()); err == nil {
					h, err = w.c.health(ctx, p.healthTimeout())
				}
				if err != nil {
					refused = "adapter upload: " + err.Error()
				} else if h.sha != sum {
					refused = fmt.Sprintf("reports adapter sha256 %q after the upload of %s", h.sha, sum)
				}
			} else if err != nil {
				refused = "down: " + err.Error()
			}
			if err == nil && w.c.ModelName == "" {
				if err = w.c.Resolve(ctx); err != nil {
					refused = "down: " + err.Error()
				}
			}
			p.mu.Lock()
			w.uploads, w.sha, w.others = h.uploads, h.sha, h.queue
			w.c.adapterSHA = ""
			if h.uploads {
				w.c.adapterSHA = sum // a switch after the check gets 409, not samples
			}
			w.groups, w.failures, w.refused = 0, 0, refused
			w.down = nil
			if refused != "" {
				w.down = errors.New(refused)
			}
			p.mu.Unlock()
			if refused != "" {
				p.logf("%s left out: %s", w.c.base(), refused)
			} else if !h.uploads {
				p.logf("%s takes no adapter uploads (not confclip serve with --adapter-dir): it samples with what it serves", w.c.base())
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var why []string
	for _, w := range p.state {
		if p.usable(w) {
			return nil
		}
		why = append(why, w.c.base()+": "+w.refused)
	}
	return fmt.Errorf("no rollout worker can sample with adapter %s: %s", short([]byte(sum)), strings.Join(why, "; "))
}

func (p *Pool) timeout() time.Duration { return cmp.Or(max(p.Timeout, 0), 10*time.Minute) }

// usable: up, and on the step's adapter if it takes uploads.
func (p *Pool) usable(w *worker) bool {
	return w.down == nil && (!w.uploads || w.sha == p.want)
}

// Report implements pipeline.RemoteRollouts.
func (p *Pool) Report() pipeline.RemoteReport {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.report
	r.Workers = nil
	for _, w := range p.state {
		wr := pipeline.WorkerReport{Endpoint: w.c.base(), Uploads: w.uploads, AdapterSHA256: w.sha, Groups: w.groups, Failures: w.failures, Refused: w.refused}
		switch {
		case wr.Refused != "":
		case w.down != nil:
			wr.Refused = "down: " + w.down.Error()
		case w.uploads && w.sha != p.want:
			wr.Refused = fmt.Sprintf("reports adapter sha256 %q, not the step's", w.sha)
		}
		r.Workers = append(r.Workers, wr)
	}
	return r
}

// poll reads every worker's /health until ctx ends: queue lengths for the
// balance, adapters for the check, and workers back up.
func (p *Pool) poll(ctx context.Context) {
	every := p.Poll
	if every <= 0 {
		every = 500 * time.Millisecond
	}
	lost := cmp.Or(max(p.Lost, 0), 5*time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		var wg sync.WaitGroup
		for _, w := range p.state {
			wg.Go(func() {
				h, err := w.c.health(ctx, p.healthTimeout())
				if ctx.Err() != nil {
					return
				}
				p.mu.Lock()
				defer p.mu.Unlock()
				if err != nil {
					if w.down == nil {
						p.logf("%s is down: %v", w.c.base(), err)
					}
					w.down = err
					if silent := time.Since(w.lastOK); silent >= lost && len(w.reqs) > 0 && !w.lost {
						w.lost = true
						p.logf("%s lost: no /health answer for %.1f s: its %d requests are given up, their groups go to other workers",
							w.c.base(), silent.Seconds(), len(w.reqs))
						for _, giveUp := range w.reqs {
							giveUp(fmt.Errorf("lost: no /health answer for %.1f s", silent.Seconds()))
						}
					}
					return
				}
				w.lastOK, w.lost = time.Now(), false
				if w.refused != "" && !strings.HasPrefix(w.refused, "down") {
					w.uploads, w.sha = h.uploads, h.sha
					return // a failed upload stays refused for the step
				}
				wasUsable := p.usable(w)
				if w.down != nil {
					p.logf("%s answers again", w.c.base())
				}
				if h.uploads && h.sha != p.want && (wasUsable || w.down != nil) {
					p.logf("%s reports adapter sha256 %q, not the step's %s: it gets no groups until it does", w.c.base(), h.sha, p.want)
				}
				w.down, w.uploads, w.sha = nil, h.uploads, h.sha
				w.others = max(0, h.queue-w.inflight)
			})
		}
		wg.Wait()
		p.mu.Lock()
		p.wake.Broadcast()
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Generate implements pipeline.RolloutSource over the workers.
func (p *Pool) Generate(ctx context.Context, cfg pipeline.Config, prompts []dataset.Prompt, emit func([]dataset.Rollout) error) (rollout.Stats, error) {
	start := time.Now()
	p.mu.Lock()
	p.init()
	for _, w := range p.state {
		w.lastOK, w.lost = start, false // SetAdapter has just read them
	}
	p.mu.Unlock()
	if len(p.state) == 0 {
		return rollout.Stats{}, errors.New("no rollout workers")
	}
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pollDone := make(chan struct{})
	go func() { p.poll(ctx); close(pollDone) }()
	stopWake := context.AfterFunc(ctx, func() { p.mu.Lock(); p.wake.Broadcast(); p.mu.Unlock() })
	defer stopWake()

	r := &poolRun{p: p, ctx: ctx, cancel: cancel, cfg: cfg, prompts: prompts, emit: emit,
		timeout: p.timeout(), grace: cmp.Or(max(p.Grace, 0), 30*time.Second),
		pending: make([]int, len(prompts)), tried: make([]map[*worker]bool, len(prompts)), attempts: make([]int, len(prompts))}
	for i := range r.pending {
		r.pending[i] = i
	}
	var wg sync.WaitGroup
	p.mu.Lock()
	for (len(r.pending) > 0 || r.inflight > 0) && r.firstErr == nil && ctx.Err() == nil {
		if len(r.pending) == 0 {
			p.wake.Wait()
			continue
		}
		i := r.pending[0]
		w := p.pick(r.tried[i])
		if w == nil {
			if !r.noWorker() {
				p.wake.Wait()
			}
			continue
		}
		r.noneSince = time.Time{}
		r.pending = r.pending[1:]
		if r.tried[i] == nil {
			r.tried[i] = map[*worker]bool{}
		}
		r.tried[i][w] = true
		r.attempts[i]++
		w.inflight++
		r.inflight++
		wg.Go(func() { r.request(w, i) })
	}
	p.mu.Unlock()
	if r.firstErr != nil {
		cancel() // the requests in flight
	}
	wg.Wait()
	cancel()
	<-pollDone
	r.st.Elapsed = time.Since(start)
	p.mu.Lock()
	defer p.mu.Unlock()
	if r.firstErr == nil && parent.Err() != nil {
		r.firstErr = parent.Err()
	}
	if r.firstErr == nil && len(r.pending) > 0 {
		r.firstErr = fmt.Errorf("%d groups not generated", len(r.pending))
	}
	return r.st, r.firstErr
}

// poolRun is one Generate call's state; its fields after ctx are guarded
// by the pool's mutex.
type poolRun struct {
	p              *Pool
	ctx            context.Context
	cancel         context.CancelFunc
	cfg            pipeline.Config
	prompts        []dataset.Prompt
	emit           func([]dataset.Rollout) error
	timeout, grace time.Duration

	pending   []int              // prompts not yet sent (or sent again)
	tried     []map[*worker]bool // the workers each prompt was sent to
	attempts  []int              // how many times each prompt was sent
	inflight  int                // requests in flight
	noneSince time.Time          // since when no worker was usable
	firstErr  error
	st        rollout.Stats
}

// noWorker is called (lock held) when no worker can take the next prompt:
// it reports whether the run gave up, after the grace period without any
// usable worker or request in flight.
func (r *poolRun) noWorker() bool {
	anyUsable := false
	for _, x := range r.p.state {
		anyUsable = anyUsable || r.p.usable(x)
	}
	switch {
	case anyUsable || r.inflight > 0:
		r.noneSince = time.Time{}
	case r.noneSince.IsZero():
		r.noneSince = time.Now()
	case time.Since(r.noneSince) > r.grace:
		var why []string
		for _, x := range r.p.state {
			reason := x.refused
			if reason == "" && x.down != nil {
				reason = "down: " + x.down.Error()
			} else if reason == "" {
				reason = fmt.Sprintf("adapter sha256 %q, not the step's", x.sha)
			}
			why = append(why, x.c.base()+": "+reason)
		}
		r.firstErr = fmt.Errorf("no rollout worker usable for %s (%d groups left): %s", r.grace, len(r.pending), strings.Join(why, "; "))
		return true
	}
	return false
}

// request sends prompt i's group to worker w and takes its answer: the
// group emitted, a bad prompt recorded, or the prompt sent elsewhere (the
// worker marked down) until every worker failed it twice.
func (r *poolRun) request(w *worker, i int) {
	p, prompts := r.p, r.prompts
	rctx, giveUp := context.WithCancelCause(r.ctx)
	rctx, stop := context.WithTimeoutCause(rctx, r.timeout, fmt.Errorf("no answer in %s", r.timeout))
	p.mu.Lock()
	if w.reqs == nil {
		w.reqs = map[int]context.CancelCauseFunc{}
	}
	w.reqs[i] = giveUp // poll gives it up if the worker is lost
	p.mu.Unlock()
	g, promptTokens, err := w.c.group(rctx, r.cfg, &prompts[i])
	cutOff := context.Cause(rctx) // timed out or given up; nil if neither
	stop()
	giveUp(nil)
	p.mu.Lock()
	defer p.mu.Unlock()
	defer p.wake.Broadcast()
	delete(w.reqs, i)
	w.inflight--
	r.inflight--
	var re requestError
	switch {
	case r.ctx.Err() != nil:
	case err == nil:
		for k := range g {
			g[k].Worker = w.c.base()
		}
		if e := r.emit(g); e != nil && r.firstErr == nil {
			r.firstErr = e
			r.cancel()
			return
		}
		w.groups++
		p.report.Groups++
		r.st.Groups++
		r.st.Records += len(g)
		r.st.PromptTokens += promptTokens
		for _, x := range g {
			r.st.Tokens += max(len(x.Tokens), len(x.Logprobs))
		}
	case errors.As(err, &re) && cutOff == nil:
		r.st.Errors = append(r.st.Errors, rollout.RecordError{Index: i, ID: prompts[i].ID, Reason: err.Error()})
	default:
		if cutOff != nil {
			err = cutOff
		}
		w.failures++
		if w.down == nil {
			w.down = err
		}
		if r.attempts[i] >= 2*len(p.state) {
			if r.firstErr == nil {
				r.firstErr = fmt.Errorf("prompt %q: failed on every worker, the last time: %w", prompts[i].ID, err)
				r.cancel()
			}
			return
		}
		p.report.Retries++
		p.logf("%s failed prompt %q (%v): sending it to another worker", w.c.base(), prompts[i].ID, err)
		r.pending = append(r.pending, i)
	}
}

// pick is the usable worker with the shortest queue and a free request
// slot, preferring those the group has not failed on; nil when none.
func (p *Pool) pick(tried map[*worker]bool) *worker {
	var best *worker
	bestFresh := false
	for _, w := range p.state {
		limit := w.c.Concurrency
		if limit <= 0 {
			limit = 8
		}
		if !p.usable(w) || w.inflight >= limit {
			continue
		}
		fresh := !tried[w]
		load := w.others + w.inflight
		switch {
		case best == nil, fresh && !bestFresh:
		case fresh == bestFresh && load < best.others+best.inflight:
		default:
			continue
		}
		best, bestFresh = w, fresh
	}
	return best
}
