// Package llama binds llama.cpp and ggml for Go: models, contexts, batches,
// decoding, logits, per-sequence KV cache, tokenizer, chat templates, LoRA
// adapters and GGUF files. It is the project's only package with cgo; no C
// type escapes it, and every failure is a Go error.
//
// Thread safety: a *Model is read-only after loading and may be shared by
// goroutines, except while it is trained: PGEval marks its trained tensors in
// the model's graph and Param.Set writes its weights, so a model being trained
// belongs to the trainer. A *Context (and a *Batch) belongs to one goroutine
// at a time.
//
// # The cgo discipline
//
// Every handle (Model, Context, Batch, Adapter, GGUF, GGUFWriter) follows
// these rules; `make test` checks them with the race detector and with a
// stress test under GOGC=1 and GOEXPERIMENT=cgocheck2 (stress_test.go).
//
//   - A handle owns its C object through a small resource struct; Close frees
//     it once, and a runtime.AddCleanup on the handle frees it if the caller
//     forgot. The cleanup's argument is the resource, never the handle (the
//     handle would then never become unreachable).
//   - Every method reaches C as one call on the handle: its with helper, or
//     enter and a deferred exit. A call counts itself in the handle's life
//     (life.go) and keeps the handle alive until it returns, so a cleanup
//     never runs mid-call. Close works as os.File's: calls that start after
//     it get ErrClosed without reaching C (methods that return no error do
//     nothing and return zero values), Close waits for the calls running
//     before it frees anything, and a second Close returns ErrClosed. So a
//     Model, Context or Adapter may be closed while other goroutines use it
//     (TestCloseWhileDecoding, under -race in make test-race).
//   - Arrays handed to C are Go memory holding only C pointers (cgo lets C
//     read them during the call), or C.calloc'd. Never store a pointer-typed
//     value into uninitialised C memory (C.malloc): Go's write barrier reads
//     the slot's old value, and garbage that looks like a heap address kills
//     the process ("found bad pointer in Go heap").
//   - What a C object depends on, its Go handle holds: a Context its Model
//     and the Adapters set on it, an Adapter its Model, a Param its Model or
//     Adapter. Model.Close closes the model's open contexts and adapters
//     first (llama.cpp's point into the model); Adapter.Close while the
//     adapter is set on an open context is refused (ErrAdapterInUse). The
//     frees take one lock (lifeMu), so each C object is freed once, in order;
//     no Close holds it while it waits for calls (a call may take it).
//   - Slices over C memory are copied out, except Context.Logits, whose row
//     is valid until the next Decode or Close and does not keep the context
//     alive (Context.CopyLogits copies it).
package llama

/*
#cgo CFLAGS: -std=c11 -I${SRCDIR}/../third_party/llama.cpp/llama/include -I${SRCDIR}/../third_party/llama.cpp/ggml/include
#cgo CXXFLAGS: -std=c++17 -I${SRCDIR}/../third_party/llama.cpp/llama/include -I${SRCDIR}/../third_party/llama.cpp/ggml/include
#cgo LDFLAGS: -L${SRCDIR}/../build/lib -Wl,--start-group -lllama -lggml -lggml-cpu -lggml-base -Wl,--end-group -lstdc++ -lm -l:libgomp.a -ldl -lpthread
#include <stdlib.h>
#include <malloc.h>
#include "llama.h"
#include "ggml.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"

#include <unistd.h>
#include <sys/syscall.h>
long syscall(long number, ...); // hidden by -std=c11

extern void confclipLog(int level, char *text, long tid);

// The thread id lets a failing call find its own error message (errors.go).
static void confclip_log_cb(enum ggml_log_level level, const char *text, void *ud) {
	(void)ud;
	confclipLog((int)level, (char *)text, (long)syscall(SYS_gettid));
}

// A fixed mmap threshold keeps glibc from raising it after the first large
// free: model and KV buffers then go back to the system when freed instead of
// fragmenting the heap (loading and closing models would grow the RSS).
static void confclip_malloc_setup(void) {
	mallopt(M_MMAP_THRESHOLD, 256 * 1024);
}

static void confclip_set_log(void) {
	llama_log_set(confclip_log_cb, NULL);
	ggml_log_set(confclip_log_cb, NULL);
}
*/
import "C"

import (
	"context"
	"log/slog"
	"runtime"
	"strings"
	"sync"
)

// BuildStamp is set at link time (-ldflags -X) to a checksum of the C
// libraries, so that the Go binary is relinked whenever they change.
var BuildStamp = "dev"

// LlamaCommit is the llama.cpp commit this project pins and patches
// (scripts/llama-source.sh's LLAMA_COMMIT, TestLlamaCommitMatchesPin).
const LlamaCommit = "0c1e57098"

// LibraryCommit is the llama.cpp commit the linked libraries were built
// from, as ggml reports it (scripts/llama-source.sh reads it off the tree it
// lays down). It is LlamaCommit unless the build took another tree
// (LLAMA_SOURCE); "unknown" for a tree whose commit could not be read.
func LibraryCommit() string { return C.GoString(C.ggml_commit()) }

var initOnce sync.Once

// Init initialises the llama.cpp backend once per process and routes its log
// to log/slog below slog.LevelInfo (debug, debug+1 for warnings, debug+2 for
// errors), so it is quiet unless the program asks for debug output.
// Every entry point calls it; calling it directly is optional.
func Init() {
	initOnce.Do(func() {
		C.confclip_malloc_setup()
		C.confclip_set_log()
		C.llama_backend_init()
	})
}

var logMu sync.Mutex

// logLines holds, per thread, a line llama.cpp is sending in pieces.
var logLines = map[int64]*strings.Builder{}

//export confclipLog
func confclipLog(level C.int, text *C.char, ctid C.long) {
	s := C.GoString(text)
	tid := int64(ctid)
	logMu.Lock()
	defer logMu.Unlock()
	// llama.cpp sends a line in pieces (GGML_LOG_LEVEL_CONT); join them.
	b := logLines[tid]
	if b == nil {
		b = &strings.Builder{}
		logLines[tid] = b
	}
	b.WriteString(s)
	if !strings.HasSuffix(s, "\n") {
		return
	}
	msg := strings.TrimRight(b.String(), "\n")
	delete(logLines, tid)
	if msg == "" {
		return
	}
	var lvl slog.Level
	switch level {
	case C.GGML_LOG_LEVEL_ERROR:
		// Kept for the Go error of the failing call, which says it to the user.
		recordError(tid, msg)
		lvl = slog.LevelDebug + 2
	case C.GGML_LOG_LEVEL_WARN:
		lvl = slog.LevelDebug + 1
	default:
		lvl = slog.LevelDebug
	}
	slog.Log(context.Background(), lvl, "llama.cpp: "+msg)
}

// SystemInfo is llama.cpp's description of the compiled backends and CPU
// features (for example "CPU : SSE3 = 1 | AVX2 = 1 | ...").
func SystemInfo() string {
	Init()
	return strings.TrimSpace(C.GoString(C.llama_print_system_info()))
}

// Backends lists the compiled ggml backends (for example "CPU", "CUDA0").
func Backends() []string {
	Init()
	var out []string
	for i := 0; i < int(C.ggml_backend_dev_count()); i++ {
		dev := C.ggml_backend_dev_get(C.size_t(i))
		out = append(out, C.GoString(C.ggml_backend_dev_name(dev)))
	}
	return out
}

// SupportsGPUOffload reports whether a GPU backend was compiled in.
func SupportsGPUOffload() bool {
	Init()
	return bool(C.llama_supports_gpu_offload())
}

// DefaultThreads is the thread count used when none is given: the machine's
// cores. ggml's OpenMP threads spin, so more threads than cores is much slower.
func DefaultThreads() int { return runtime.NumCPU() }
