package server

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"
	"time"
)

// The network's bounds, on both sides of a connection. A peer that goes
// silent (its host down, a partition that drops packets without a reset)
// holds a connection until TCP gives up, which by Linux's defaults takes
// over two hours when idle and about 15 minutes with data unacknowledged.
const (
	// connectTimeout bounds a client's TCP (and TLS) connection set-up.
	connectTimeout = 5 * time.Second
	// stallTimeout bounds each wait for the next piece of a body, the
	// request's or the answer's, on the client and (for adapter uploads)
	// on the server: a transfer that makes no progress for that long is
	// cut off.
	stallTimeout = 10 * time.Second
	// userTimeout is TCP_USER_TIMEOUT (Linux): data left unacknowledged
	// for that long closes the connection; it also ends the keepalive
	// probes below at the same time.
	userTimeout = keepAliveIdle + keepAliveCount*keepAliveInterval
)

// TCP keepalive on every connection, the server's and the client's: a
// connection idle for keepAliveIdle is probed every keepAliveInterval, and
// closed after keepAliveCount probes go unanswered, so a silent peer is
// found within 11 s (Go's default takes 150 s, Linux's two hours). A
// server then sees its client gone and frees the request's slots; a client
// waiting for an answer sees the connection fail and retries elsewhere.
const (
	keepAliveIdle     = 5 * time.Second
	keepAliveInterval = 2 * time.Second
	keepAliveCount    = 3
)

var keepAlive = net.KeepAliveConfig{Enable: true, Idle: keepAliveIdle, Interval: keepAliveInterval, Count: keepAliveCount}

// Listen opens a TCP listener for Serve whose connections have the
// keepalive above and TCP_USER_TIMEOUT: a client that vanishes mid-request
// without closing its connection (its host gone, a partition) is found
// within userTimeout, and its request's slots go to others.
func Listen(ctx context.Context, addr string) (net.Listener, error) {
	lc := net.ListenConfig{KeepAliveConfig: keepAlive}
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return userTimeoutListener{ln}, nil
}

var userTimeoutWarning sync.Once

// userTimeoutListener sets TCP_USER_TIMEOUT on each accepted connection.
type userTimeoutListener struct{ net.Listener }

func (l userTimeoutListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		if raw, err := tc.SyscallConn(); err == nil {
			// Where the socket refuses the option, the keepalive above
			// still bounds a dead peer and the connection itself is
			// sound: it is served all the same, and the log says so once.
			if err := setUserTimeout("", "", raw); err != nil {
				userTimeoutWarning.Do(func() {
					log.Printf("serve: TCP_USER_TIMEOUT refused (%v); a vanished client is found by keepalive alone", err)
				})
			}
		}
	}
	return c, nil
}

// netClient is the HTTP client of a Client that brings none: connections
// set up within connectTimeout, with the keepalive and TCP_USER_TIMEOUT
// above; idle ones are dropped before the server's 60 s would.
var netClient = &http.Client{Transport: &http.Transport{
	Proxy: http.ProxyFromEnvironment,
	DialContext: (&net.Dialer{Timeout: connectTimeout, KeepAliveConfig: keepAlive,
		Control: setUserTimeout}).DialContext,
	TLSHandshakeTimeout: connectTimeout,
	ForceAttemptHTTP2:   true,
	MaxIdleConnsPerHost: 64,
	IdleConnTimeout:     50 * time.Second,
}}

// phaseError is a request cut off because one of its phases ran out.
type phaseError struct {
	phase string
	limit time.Duration
}

func (e *phaseError) Error() string { return fmt.Sprintf("%s: nothing in %s", e.phase, e.limit) }

// phases is one request's watchdog: each phase (connecting, sending the
// body, waiting for the first byte of the answer, reading the answer) has
// its own limit, and every piece of a body that moves restarts the body's.
type phases struct {
	mu     sync.Mutex
	t      *time.Timer
	phase  string
	limit  time.Duration
	cancel context.CancelCauseFunc
}

// enter starts a phase; limit 0 leaves it to the request's context.
func (w *phases) enter(phase string, limit time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.t == nil {
		w.t = time.AfterFunc(time.Hour, w.fire)
	}
	w.phase, w.limit = phase, limit
	w.t.Stop()
	if limit > 0 {
		w.t.Reset(limit)
	}
}

func (w *phases) fire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cancel(&phaseError{w.phase, w.limit})
}

func (w *phases) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.t != nil {
		w.t.Stop()
	}
}

// moving restarts a body phase's limit at each piece read.
type moving struct {
	r     io.Reader
	w     *phases
	phase string
}

func (m moving) Read(p []byte) (int, error) {
	m.w.enter(m.phase, stallTimeout)
	return m.r.Read(p)
}

// send makes one request with a limit on each phase: the connection within
// connectTimeout (the dialer's), each piece of the request body within
// stallTimeout, the answer's first byte within firstByte of the request
// sent (0: only ctx bounds it; a completion's first byte comes when it is
// generated), and each piece of the answer within stallTimeout. It reads at
// most limit bytes of the answer. An error names the phase that ran out.
func (c *Client) send(ctx context.Context, req *http.Request, firstByte time.Duration, limit int64) ([]byte, int, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	w := &phases{cancel: cancel}
	defer w.stop()
	w.enter("connecting", connectTimeout+time.Second) // beyond the dialer's own
	trace := &httptrace.ClientTrace{
		GotConn:              func(httptrace.GotConnInfo) { w.enter("sending the request", stallTimeout) },
		WroteRequest:         func(httptrace.WroteRequestInfo) { w.enter("waiting for the answer", firstByte) },
		GotFirstResponseByte: func() { w.enter("reading the answer", stallTimeout) },
	}
	req = req.WithContext(httptrace.WithClientTrace(ctx, trace))
	if req.Body != nil && req.Body != http.NoBody {
		req.Body = struct {
			io.Reader
			io.Closer
		}{moving{req.Body, w, "sending the request"}, req.Body}
	}
	fail := func(err error) error {
		if pe, ok := context.Cause(ctx).(*phaseError); ok {
			return fmt.Errorf("%s %s: %w", req.Method, req.URL, pe)
		}
		return err
	}
	resp, err := c.http().Do(req)
	if err != nil {
		return nil, 0, fail(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(moving{resp.Body, w, "reading the answer"}, limit))
	if err != nil {
		return b, resp.StatusCode, fail(err)
	}
	return b, resp.StatusCode, nil
}
