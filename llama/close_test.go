package llama_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/confclip/confclip/llama"
)

// TestCloseWhileDecoding closes a Model while goroutines decode on its
// contexts, tokenize on it and read an adapter's tensor, as os.File closes
// under running I/O: every call either completes or returns ErrClosed, no
// call that starts after Close returned succeeds, Close frees nothing under
// a running call, and a second Close of the model or of a context returns
// ErrClosed. Before, Close freed the contexts under the running decodes: the
// test died of a segmentation fault in llama_decode (and a second Close
// returned nil). make test-race runs it under the race detector.
func TestCloseWhileDecoding(t *testing.T) {
	const workers = 3
	for round := range 8 {
		m, err := llama.LoadModel(tinyPath, llama.ModelParams{})
		if err != nil {
			t.Fatal(err)
		}
		a, err := llama.LoadAdapter(m, writeTinyAdapter(t, m))
		if err != nil {
			t.Fatal(err)
		}
		p, err := a.Tensor(a.TensorNames()[0])
		if err != nil {
			t.Fatal(err)
		}
		ctxs := make([]*llama.Context, workers)
		for i := range ctxs {
			if ctxs[i], err = llama.NewContext(m, llama.ContextParams{NCtx: 128, Threads: 1}); err != nil {
				t.Fatal(err)
			}
		}
		// clock orders the starts of successful calls against Close's
		// return.
		var clock, lastOK atomic.Int64
		ok := func(start int64) {
			for {
				last := lastOK.Load()
				if start <= last || lastOK.CompareAndSwap(last, start) {
					return
				}
			}
		}
		var wg sync.WaitGroup
		var calls atomic.Int64
		errs := make(chan error, workers+2)
		call := func(f func() error) {
			defer wg.Done()
			for {
				start := clock.Add(1)
				err := f()
				if errors.Is(err, llama.ErrClosed) {
					return
				}
				if err != nil {
					errs <- err
					return
				}
				ok(start)
				calls.Add(1)
			}
		}
		toks := []llama.Token{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
		for _, c := range ctxs {
			wg.Add(1)
			go call(func() error {
				b := llama.NewBatch(len(toks), 1)
				defer b.Close()
				for i, tok := range toks {
					if _, err := b.Add(tok, i, []int{0}, i == len(toks)-1); err != nil {
						return err
					}
				}
				c.ClearKV()
				if err := c.Decode(b); err != nil {
					return err
				}
				row := make([]float32, m.NVocab())
				return c.CopyLogits(len(toks)-1, row)
			})
		}
		wg.Add(2)
		go call(func() error { _, err := m.Tokenize("the cat sat on the mat", true, false); return err })
		vals := make([]float32, p.Len())
		go call(func() error { return p.Get(vals) })

		for calls.Load() < 2*workers { // every goroutine under way
			time.Sleep(100 * time.Microsecond)
		}
		if err := m.Close(); err != nil {
			t.Fatal(err)
		}
		closed := clock.Add(1)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("round %d: a call failed otherwise than ErrClosed: %v", round, err)
		}
		if last := lastOK.Load(); last > closed {
			t.Fatalf("round %d: a call that started after Close returned succeeded (tick %d, Close at %d)", round, last, closed)
		}
		if err := m.Close(); !errors.Is(err, llama.ErrClosed) {
			t.Errorf("round %d: second Model.Close: %v, want ErrClosed", round, err)
		}
		for _, c := range ctxs {
			if err := c.Close(); !errors.Is(err, llama.ErrClosed) {
				t.Errorf("round %d: Context.Close after the model's: %v, want ErrClosed", round, err)
			}
		}
		if err := a.Close(); !errors.Is(err, llama.ErrClosed) {
			t.Errorf("round %d: Adapter.Close after the model's: %v, want ErrClosed", round, err)
		}
		if round == 0 {
			t.Logf("%d calls succeeded before Close, every goroutine then got ErrClosed", calls.Load())
		}
	}
}

// TestCloseContextWhileDecoding: a Context's own Close under running
// decodes on it waits for them, as the model's does; the model stays open.
func TestCloseContextWhileDecoding(t *testing.T) {
	m, err := llama.LoadModel(tinyPath, llama.ModelParams{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for range 8 {
		c, err := llama.NewContext(m, llama.ContextParams{NCtx: 64, Threads: 1})
		if err != nil {
			t.Fatal(err)
		}
		started, done := make(chan struct{}), make(chan error, 1)
		go func() {
			once := false
			for {
				b := llama.NewBatch(4, 1)
				for i := range 4 {
					if _, err := b.Add(llama.Token(i+1), i, []int{0}, i == 3); err != nil {
						done <- err
						return
					}
				}
				c.ClearKV()
				err := c.Decode(b)
				b.Close()
				if !once {
					once = true
					close(started)
				}
				if err != nil {
					done <- err
					return
				}
			}
		}()
		<-started
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if err := <-done; !errors.Is(err, llama.ErrClosed) {
			t.Fatalf("decode after the context's Close: %v, want ErrClosed", err)
		}
		if err := c.Close(); !errors.Is(err, llama.ErrClosed) {
			t.Fatalf("second Context.Close: %v, want ErrClosed", err)
		}
	}
	if _, err := m.Tokenize("still open", true, false); err != nil {
		t.Fatalf("the model after its context's Close: %v", err)
	}
}
