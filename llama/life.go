package llama

import "sync"

// life counts one handle's calls in flight, as Go's os.File counts the I/O
// on its descriptor (internal/poll's fdMutex): Close marks the handle
// closing, so that a call that starts after it gets ErrClosed, waits for
// the calls that are running, and only then frees the C object. A second
// Close gets ErrClosed. Starting a call never blocks; only Close waits.
type life struct {
	mu      sync.Mutex
	idle    *sync.Cond // on mu: broadcast when calls drops to 0 while closing
	calls   int
	closing bool
}

// acquire starts a call: false once Close has begun.
func (l *life) acquire() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closing {
		return false
	}
	l.calls++
	return true
}

// release ends a call that acquire started.
func (l *life) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls--
	if l.calls == 0 && l.closing && l.idle != nil {
		l.idle.Broadcast()
	}
}

// close marks the handle closing and waits until no call runs. It reports
// whether this was the first close; a later one waits too (a concurrent
// first close may still be waiting), so that no caller frees what a call
// is using.
func (l *life) close() (first bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	first = !l.closing
	l.closing = true
	if l.idle == nil {
		l.idle = sync.NewCond(&l.mu)
	}
	for l.calls > 0 {
		l.idle.Wait()
	}
	return first
}

// reopen undoes a close that found the handle must stay open (an adapter
// still set on a context).
func (l *life) reopen() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closing = false
}

// isClosing reports whether Close has begun.
func (l *life) isClosing() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closing
}
