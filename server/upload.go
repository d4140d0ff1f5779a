package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/confclip/confclip/internal/atomicfile"
)

// AdapterSHA256Header, on an upload, is the sha256 the body must have; a
// body with another is refused and nothing is stored.
const AdapterSHA256Header = "Confclip-Adapter-Sha256"

// defaultMaxAdapterBytes bounds an uploaded adapter when
// Options.MaxAdapterBytes is 0.
const defaultMaxAdapterBytes = 1 << 30

// adapterFile is the file NAME names in the adapter folder: a plain file
// name ending in .gguf, with no folder part and no leading dot (the
// uploads' temporary files start with one).
func (s *Server) adapterFile(name string) (string, *apiError) {
	if s.o.AdapterDir == "" {
		return "", &apiError{Status: http.StatusForbidden, Type: "permission_error", Message: "loading adapters is off: start the server with --adapter-dir"}
	}
	if name == "" || !filepath.IsLocal(name) || filepath.Base(name) != name || strings.ContainsAny(name, `/\`) ||
		strings.HasPrefix(name, ".") || !strings.HasSuffix(name, ".gguf") {
		return "", badRequest("name", "adapter name %q: want a file name ending in .gguf, without a folder", name)
	}
	return filepath.Join(s.o.AdapterDir, name), nil
}

// upload stores a LoRA adapter sent as the body of PUT /v1/adapters/NAME in
// the adapter folder (atomically: a cut upload leaves no file) and switches
// to it, as POST /v1/adapters does: the running batch finishes first. The
// body is bounded by MaxAdapterBytes (413 beyond); with the
// Confclip-Adapter-Sha256 header, a body with another hash is refused. A
// body that stops arriving (no byte for BodyTimeout: a client gone silent)
// or is cut off (the connection closed, the server shutting down) is
// refused the same way: nothing is stored, nothing is loaded. The
// answer gives the stored file, its size and its sha256, which GET /health
// then reports.
func (s *Server) upload(w http.ResponseWriter, r *http.Request) {
	path, e := s.adapterFile(r.PathValue("name"))
	if e != nil {
		writeError(w, e)
		return
	}
	limit := s.o.MaxAdapterBytes
	if limit <= 0 {
		limit = defaultMaxAdapterBytes
	}
	tooLarge := &apiError{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error",
		Message: fmt.Sprintf("adapter over %d bytes (the server's --max-adapter-bytes)", limit)}
	if r.ContentLength > limit {
		writeError(w, tooLarge)
		return
	}
	want := strings.ToLower(strings.TrimSpace(r.Header.Get(AdapterSHA256Header)))
	// Each piece of the body must arrive within BodyTimeout, and none is
	// waited for once shutdown starts.
	rc := http.NewResponseController(w)
	body := stalling{r: http.MaxBytesReader(w, r.Body, limit), rc: rc, limit: s.o.BodyTimeout}
	stop := context.AfterFunc(s.reads, func() { rc.SetReadDeadline(time.Now()) })
	defer stop()
	h := sha256.New()
	var n int64
	var bodyErr *apiError
	err := atomicfile.Write(path, func(f io.Writer) error {
		var err error
		n, err = io.Copy(io.MultiWriter(f, h), body)
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			bodyErr = tooLarge
		case err != nil && s.reads.Err() != nil:
			bodyErr = &apiError{Status: http.StatusServiceUnavailable, Type: "server_error", Message: "the server is shutting down: nothing stored"}
		case errors.Is(err, os.ErrDeadlineExceeded):
			bodyErr = &apiError{Status: http.StatusRequestTimeout, Type: "invalid_request_error",
				Message: fmt.Sprintf("the adapter stopped arriving after %d bytes (nothing for %v): nothing stored", n, s.o.BodyTimeout)}
		case err != nil:
			bodyErr = badRequest("", "reading the adapter: %v", err)
		case n == 0:
			bodyErr = badRequest("", "empty body: send the adapter's GGUF file as the body")
		case want != "" && want != hex.EncodeToString(h.Sum(nil)):
			bodyErr = badRequest("", "the body's sha256 is %s, the %s header says %s: nothing stored", hex.EncodeToString(h.Sum(nil)), AdapterSHA256Header, want)
		}
		if bodyErr != nil {
			return bodyErr
		}
		return err
	})
	if bodyErr != nil {
		w.Header().Set("Connection", "close") // the rest of the body is not waited for
		writeError(w, bodyErr)
		return
	}
	rc.SetReadDeadline(time.Time{})
	if err != nil {
		writeError(w, &apiError{Status: http.StatusInternalServerError, Type: "server_error", Message: err.Error()})
		return
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if e := s.switchAdapter(path); e != nil {
		os.Remove(path) // not a loadable adapter: keep nothing
		writeError(w, e)
		return
	}
	writeJSON(w, map[string]any{"adapter": path, "adapter_sha256": sum, "bytes": n})
}

// stalling reads a body with a deadline on each piece: a sender that stops
// sending is cut off after limit, however long the whole body takes.
type stalling struct {
	r     io.Reader
	rc    *http.ResponseController
	limit time.Duration
}

func (s stalling) Read(p []byte) (int, error) {
	s.rc.SetReadDeadline(time.Now().Add(s.limit)) // not supported by every ResponseWriter: then unbounded
	return s.r.Read(p)
}

// switchAdapter loads the adapter at path between batches and waits for it.
func (s *Server) switchAdapter(path string) *apiError {
	res := make(chan error, 1)
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return &apiError{Status: http.StatusServiceUnavailable, Type: "server_error", Message: "the server is shutting down"}
	}
	s.ctrl = append(s.ctrl, func() {
		err := s.m.LoadAdapter(path)
		s.noteAdapter() // before the answer: /health says the new one at once
		res <- err
	})
	s.wake.Broadcast()
	s.mu.Unlock()
	if err := <-res; err != nil {
		return badRequest("", "adapter %s: %v", filepath.Base(path), err)
	}
	return nil
}

// noteAdapter records the loaded adapter's sha256 for GET /health; the
// scheduler's goroutine calls it after every control operation, so that
// it never races with a switch.
func (s *Server) noteAdapter() {
	sum, err := s.m.AdapterSHA256()
	if err != nil {
		sum = ""
	}
	s.adapterSHA.Store(&sum)
}

// loadedAdapterSHA256 is the sha256 of the adapter the engine samples
// with; "" for none.
func (s *Server) loadedAdapterSHA256() string {
	if p := s.adapterSHA.Load(); p != nil {
		return *p
	}
	return ""
}

type pinKey struct{}

// pinAdapter takes a completions request's Confclip-Adapter-Sha256 header:
// the request runs only with the adapter of that sha256 (adapterConflict).
// `run`'s workers send it, so that a worker whose adapter changed after
// the run checked it (restarted, switched by someone else) refuses the
// group instead of sampling it from another policy.
func pinAdapter(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if want := strings.ToLower(strings.TrimSpace(r.Header.Get(AdapterSHA256Header))); want != "" {
			r = r.WithContext(context.WithValue(r.Context(), pinKey{}, want))
		}
		h(w, r)
	}
}

// adapterConflict is the 409 for a request pinned to another adapter than
// the loaded one; the scheduler checks it as it admits the request into
// the batch, after any switch queued before.
func (s *Server) adapterConflict(ctx context.Context) *apiError {
	want, _ := ctx.Value(pinKey{}).(string)
	if want == "" {
		return nil
	}
	if have := s.loadedAdapterSHA256(); have != want {
		if have == "" {
			have = "none"
		}
		return &apiError{Status: http.StatusConflict, Type: "invalid_request_error", Code: "adapter_mismatch",
			Message: fmt.Sprintf("the request wants adapter sha256 %s; this server has %s", want, have)}
	}
	return nil
}
