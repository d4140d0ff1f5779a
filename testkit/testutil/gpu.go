package testutil

import (
	"context"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/confclip/confclip/llama"
)

// GPU returns the first GPU device for a test that compares it with the
// CPU. Without one the test is skipped, saying NOT RUN and why; with
// CONFCLIP_REQUIRE_GPU set (the CI's GPU step) it fails instead, so that a
// GPU test never passes by not running.
func GPU(t testing.TB) llama.Device {
	t.Helper()
	var names []string
	for _, d := range llama.Devices() {
		if d.IsGPU() {
			return d
		}
		names = append(names, d.Name)
	}
	msg := "NOT RUN: no GPU device (devices: " + strings.Join(names, ", ") + "; backends: " +
		strings.Join(llama.BackendNames(), ", ") + "); build with `make GGML_VULKAN=ON` (docs/gpu.md)"
	if os.Getenv("CONFCLIP_REQUIRE_GPU") != "" {
		t.Fatal(strings.TrimPrefix(msg, "NOT RUN: ") + ", and CONFCLIP_REQUIRE_GPU is set")
	}
	t.Skip(msg)
	return llama.Device{}
}

// schedNode matches ggml's scheduler debug line for one graph node:
// "node #  3 (   MUL_MAT):  <name, 20 chars> (<size>) [Vulka  <cause>] ...".
var schedNode = regexp.MustCompile(`node #\s*\d+ \(\s*([A-Z0-9_]+)\): .{20} \(.{5}\) \[\s*(\S+)`)

// SchedAssignments runs f with ggml's scheduler debug output on and returns,
// for each backend (its name cut to 5 characters, as ggml prints it: "CPU",
// "Vulka"), how many graph nodes of each op it was given. The scheduler reads
// GGML_SCHED_DEBUG when a context is created, so f must create its contexts.
func SchedAssignments(t testing.TB, f func()) map[string]map[string]int {
	t.Helper()
	t.Setenv("GGML_SCHED_DEBUG", "2")
	rec := &lineRecorder{}
	prev := slog.Default()
	slog.SetDefault(slog.New(rec))
	defer slog.SetDefault(prev)
	f()
	out := map[string]map[string]int{}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, l := range rec.lines {
		if m := schedNode.FindStringSubmatch(l); m != nil {
			if out[m[2]] == nil {
				out[m[2]] = map[string]int{}
			}
			out[m[2]][m[1]]++
		}
	}
	return out
}

// lineRecorder is a slog handler that keeps every message, debug included.
type lineRecorder struct {
	mu    sync.Mutex
	lines []string
}

func (r *lineRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *lineRecorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *lineRecorder) WithGroup(string) slog.Handler            { return r }
func (r *lineRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	r.lines = append(r.lines, rec.Message)
	r.mu.Unlock()
	return nil
}

// Bound checks a GPU-against-CPU measurement: over the bound (or NaN) the
// test fails, on every device.
func Bound(t testing.TB, dev llama.Device, what string, got, bound float64) {
	t.Helper()
	if !(got <= bound) {
		t.Fatalf("on %s %s is %.3g, over the bound %g", dev.Name, what, got, bound)
	}
}

// reducedPrecision reports whether dev computes matrix products of F32
// tensors at less than F32's precision: ggml's Vulkan backend from F16
// copies on a device with F16 arithmetic unless GGML_VK_DISABLE_F16 is set;
// the CUDA backend always, on TF32 tensor cores (cuBLAS's handles are set to
// TF32 math, and ggml's own kernels for products of few columns use TF32
// mma: with NVIDIA_TF32_OVERRIDE=0, which turns off cuBLAS's, an H200's
// logits matched the CPU's to 2e-6 but rollouts' log-probs still differed
// by 7e-3, docs/gpu.md). A GPU-against-CPU bound there is the reduced one.
func reducedPrecision(dev llama.Device) bool {
	switch {
	case strings.HasPrefix(dev.Name, "Vulkan"):
		return os.Getenv("GGML_VK_DISABLE_F16") == ""
	case strings.HasPrefix(dev.Name, "CUDA"):
		return true
	}
	return false
}

// PrecisionBound is the bound of a GPU-against-CPU check on dev: f16 where
// the device's matrix products round F32 inputs to F16 or TF32
// (reducedPrecision), f32 otherwise.
func PrecisionBound(dev llama.Device, f32, f16 float64) float64 {
	if reducedPrecision(dev) {
		return f16
	}
	return f32
}
