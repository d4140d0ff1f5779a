package llama

/*
#include <unistd.h>
#include <sys/syscall.h>
long syscall(long number, ...); // hidden by -std=c11

static long confclip_tid(void) { return (long)syscall(SYS_gettid); }
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"

	"github.com/confclip/confclip/llama/internal/handle"
)

// llama.cpp says why a call failed in its log, not in its return value. To
// give each failing call its own reason, call runs the C function with the
// goroutine locked to its OS thread and keeps the ERROR lines that llama.cpp
// logs from that thread meanwhile; concurrent calls on other threads keep
// theirs. (Messages logged from ggml's worker threads are not attributed.)

// captures maps an OS thread id to the capture of the call running on it.
var captures sync.Map // int64 -> *capture

type capture struct{ msg string }

// call runs f, a call into llama.cpp, and returns the last error line
// llama.cpp logged on this thread while it ran ("" when none).
func call(f func()) string {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid := int64(C.confclip_tid())
	c := &capture{}
	captures.Store(tid, c)
	defer captures.Delete(tid)
	f()
	return c.msg
}

// recordError keeps an ERROR line for the call running on thread tid; a
// line logged outside any call is only logged. The first line is the
// reason ("missing tensor ..."), the ones after it the callers' summaries
// ("failed to load model"): the first two are kept.
func recordError(tid int64, msg string) {
	if c, ok := captures.Load(tid); ok {
		c := c.(*capture)
		switch {
		case c.msg == "":
			c.msg = msg
		case !strings.Contains(c.msg, "; "):
			c.msg += "; " + strings.TrimPrefix(msg, "llama.cpp: ")
		}
	}
}

// because appends llama.cpp's own message, when it logged one.
func because(reason, msg string) string { return handle.Because(reason, msg) }

// FileError is a problem with a model, adapter or GGUF file. Err, when set,
// is the underlying error (errors.Is(err, fs.ErrNotExist) sees through).
type FileError struct {
	Path   string
	Reason string
	Err    error
}

func (e *FileError) Error() string { return fmt.Sprintf("%s: %s", e.Path, e.Reason) }

// Unwrap returns the underlying error.
func (e *FileError) Unwrap() error { return e.Err }

// fileErr makes a FileError; an error among args becomes its Err.
func fileErr(path, format string, args ...any) error {
	fe := &FileError{Path: path, Reason: fmt.Sprintf(format, args...)}
	for _, a := range args {
		if err, ok := a.(error); ok {
			fe.Err = err
		}
	}
	return fe
}

// ErrClosed is returned by methods of a handle (Model, Context, Batch,
// Adapter) after its Close.
var ErrClosed = errors.New("llama: use of a closed handle")

// lifeMu orders the freeing of C objects that depend on each other: a
// context's or adapter's Close, its cleanup, and its model's Close (which
// frees them first) each take it, so each object is freed once and never
// after the model it points into.
var lifeMu sync.Mutex
