package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// Serve serves the API on ln until ctx is done (the command's SIGINT or
// SIGTERM), then shuts down in order: it stops taking requests, lets those
// in flight finish within Options.ShutdownTimeout, and stops the scheduler
// (Close). A listener that fails ends it the same way, with its error.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := s.HTTPServer()
	if s.o.AccessLog != nil {
		hs.Handler = accessLog(hs.Handler, s.o.AccessLog)
	}
	note := s.o.Log
	if note == nil {
		note = io.Discard
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		s.Close()
		return err
	case <-ctx.Done():
	}
	fmt.Fprintln(note, "shutting down: finishing the requests in flight")
	grace := s.o.ShutdownTimeout
	if grace == 0 {
		grace = 5 * time.Minute
	}
	dctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	err := hs.Shutdown(dctx)
	s.Close()
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("shutdown: %w", err)
	}
	fmt.Fprintln(note, "stopped")
	return nil
}

// accessLog writes one line per request to w when it ends: time, client,
// method and path, status, bytes of the response, duration.
func accessLog(h http.Handler, w io.Writer) http.Handler {
	var mu sync.Mutex
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: rw, status: http.StatusOK}
		h.ServeHTTP(rec, r)
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(w, "%s %s %s %s %d %dB %s\n", start.Format("2006-01-02T15:04:05.000Z07:00"), r.RemoteAddr, r.Method, r.URL.Path,
			rec.status, rec.bytes, time.Since(start).Round(time.Millisecond))
	})
}

// statusRecorder notes a response's status and size; it flushes, so that
// streams still stream.
type statusRecorder struct {
	http.ResponseWriter
	status, bytes int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	n, err := s.ResponseWriter.Write(b)
	s.bytes += n
	return n, err
}

// Unwrap lets http.ResponseController reach the connection: without it
// the read deadlines of slow bodies (BodyTimeout) were not set under the
// access log.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
