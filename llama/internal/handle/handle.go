// Package handle is how the packages under llama/ that call llama.cpp's C
// API beside the binding (reference, opcheck: loops and checks the tests
// and benchmarks compare the binding with) use the binding's own handles
// and error capture, without either being part of llama's API. Package
// llama sets the functions as it starts; a package that uses them imports
// llama.
package handle

import (
	"strings"
	"unsafe"
)

var (
	// Context runs f with the C pointer (struct llama_context *) of ctx, a
	// *llama.Context, and its number of sequences, while the context is
	// held open (its Close waits for f); it returns llama.ErrClosed and
	// does not run f on a closed context.
	Context func(ctx any, f func(c unsafe.Pointer, nseq int)) error
	// Call runs f on a locked OS thread and returns the first ERROR line
	// llama.cpp or ggml logged during it ("" when none).
	Call func(f func()) string
)

// Because appends llama.cpp's own message (from Call), when it logged one,
// to a reason.
func Because(reason, msg string) string {
	if msg == "" {
		return reason
	}
	return reason + ": " + strings.TrimPrefix(msg, "llama.cpp: ")
}
