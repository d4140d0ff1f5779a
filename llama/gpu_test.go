package llama_test

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/llama/opcheck"
	"github.com/confclip/confclip/testkit/testutil"
	"github.com/confclip/confclip/train"
)

// TestDevices runs in every build: the CPU is always listed with its memory,
// and asking for GPU layers where there is no GPU is an error that says why,
// never silently the CPU.
func TestDevices(t *testing.T) {
	var cpu *llama.Device
	var gpus []string
	for _, d := range llama.Devices() {
		t.Logf("device %s (%s, backend %s): %s, %d of %d MiB free", d.Name, d.Type, d.Backend, d.Description, d.MemFree>>20, d.MemTotal>>20)
		if d.Type == "cpu" {
			cpu = &d
		}
		if d.IsGPU() {
			gpus = append(gpus, d.Name)
		}
	}
	if cpu == nil || cpu.MemTotal == 0 {
		t.Fatalf("no CPU device with its memory in %+v", llama.Devices())
	}
	t.Logf("backends: %s", strings.Join(llama.BackendNames(), ", "))

	// The CPU named as the device means no GPU: layers asked with it are an error.
	if _, err := llama.LoadModel(tinyPath, llama.ModelParams{Device: "CPU", GPULayers: 4}); err == nil || !strings.Contains(err.Error(), "gpu_layers = 0") {
		t.Fatalf("device CPU with 4 GPU layers: got %v, want an error that says to set gpu_layers = 0", err)
	}
	m, err := llama.LoadModel(tinyPath, llama.ModelParams{Device: "cpu"})
	if err != nil {
		t.Fatalf("device cpu without GPU layers: %v", err)
	}
	m.Close()

	_, err = llama.LoadModel(tinyPath, llama.ModelParams{GPULayers: -1, Device: "NoSuchGPU0"})
	if err == nil || !strings.Contains(err.Error(), tinyPath) {
		t.Fatalf("unknown device: got %v, want an error naming the model file", err)
	}
	if len(gpus) > 0 && !strings.Contains(err.Error(), gpus[0]) {
		t.Fatalf("unknown device: %v does not list the devices there are (%v)", err, gpus)
	}

	m, err = llama.LoadModel(tinyPath, llama.ModelParams{GPULayers: -1})
	if len(gpus) > 0 {
		if err != nil {
			t.Fatalf("GPU layers with devices %v: %v", gpus, err)
		}
		m.Close()
		return
	}
	if !errors.Is(err, llama.ErrNoGPU) {
		t.Fatalf("GPU layers without a GPU: got %v, want ErrNoGPU", err)
	}
	want := "GGML_VULKAN=ON"
	if len(llama.BackendNames()) > 1 {
		want = "found no device"
	}
	if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "gpu_layers = 0") {
		t.Fatalf("GPU layers without a GPU: %q should say %q and how to run on the CPU", err, want)
	}
	t.Logf("without a GPU: %v", err)
}

// lastLogits decodes toks in one batch and returns a copy of the last row.
func lastLogits(t *testing.T, c *llama.Context, toks []llama.Token) []float32 {
	t.Helper()
	rows := decodeOne(t, c, toks, 0)
	return append([]float32(nil), rows[len(rows)-1]...)
}

// TestGPULogitsMatchCPU: every layer on the device against the CPU, with and
// without a LoRA adapter (loaded once per model: on the device its tensors
// live in device memory), and with no layers offloaded nothing may run on
// the device (op offload is off unless asked for).
func TestGPULogitsMatchCPU(t *testing.T) {
	gpu := testutil.GPU(t)
	cpuM, err := llama.LoadModel(tinyPath, llama.ModelParams{})
	if err != nil {
		t.Fatal(err)
	}
	defer cpuM.Close()
	gpuM, err := llama.LoadModel(tinyPath, llama.ModelParams{GPULayers: -1, Device: gpu.Name})
	if err != nil {
		t.Fatal(err)
	}
	defer gpuM.Close()
	toks, err := cpuM.Tokenize("What is 12+7? The answer is", true, false)
	if err != nil {
		t.Fatal(err)
	}
	adapterPath := writeTinyAdapter(t, cpuM)
	for _, withAdapter := range []bool{false, true} {
		var rows [2][]float32
		for i, m := range []*llama.Model{cpuM, gpuM} {
			c := newCtx(t, m, llama.ContextParams{NCtx: 256, TypeK: llama.KVF32, TypeV: llama.KVF32, FlashAttn: llama.FlashAttnOff})
			if withAdapter {
				a, err := llama.LoadAdapter(m, adapterPath)
				if err != nil {
					t.Fatal(err)
				}
				defer a.Close()
				if err := c.SetAdapter(a, 1); err != nil {
					t.Fatal(err)
				}
			}
			rows[i] = lastLogits(t, c, toks)
			c.Close()
		}
		d := maxDiff(rows[0], rows[1])
		t.Logf("%s, adapter %v: max |logit CPU - device| %.3g", gpu.Name, withAdapter, d)
		// lavapipe: 3.0e-3 with Vulkan's F16 products, 1.7e-6 without
		testutil.Bound(t, gpu, fmt.Sprintf("max |logit CPU - device| (adapter %v)", withAdapter), d, testutil.PrecisionBound(gpu, 1e-4, 1e-2))
	}

	// gpu_layers 0 in a GPU build: no node on the device, even for a batch
	// large enough for op offload; with OpOffload the matrix products go there.
	long := make([]llama.Token, 0, 128)
	for len(long) < 128 {
		long = append(long, toks...)
	}
	long = long[:128]
	for _, offload := range []bool{false, true} {
		m, err := llama.LoadModel(tinyPath, llama.ModelParams{OpOffload: offload})
		if err != nil {
			t.Fatal(err)
		}
		byBackend := testutil.SchedAssignments(t, func() {
			c := newCtx(t, m, llama.ContextParams{NCtx: 256})
			lastLogits(t, c, long)
			c.Close()
		})
		m.Close()
		onDevice := 0
		for b, ops := range byBackend {
			if b != "CPU" {
				for _, n := range ops {
					onDevice += n
				}
			}
		}
		t.Logf("gpu_layers 0, op offload %v: nodes by backend %v", offload, byBackend)
		if len(byBackend) == 0 {
			t.Fatal("no scheduler assignments were logged")
		}
		if !offload && onDevice > 0 {
			t.Fatalf("gpu_layers 0 ran %d nodes on a device: %v", onDevice, byBackend)
		}
		if offload && onDevice == 0 {
			t.Fatalf("op offload on: no node ran on the device: %v", byBackend)
		}
	}
}

// TestGPUGreedyStories compares greedy decoding of stories260K with every
// layer on the device against the CPU: the same tokens, and the chosen
// tokens' log-probs within a bound.
func TestGPUGreedyStories(t *testing.T) {
	gpu := testutil.GPU(t)
	path := filepath.Join(sharedModels(t), "stories260K.gguf")
	var gens [2][]llama.Token
	var lps [2][]float64
	for i, p := range []llama.ModelParams{{}, {GPULayers: -1, Device: gpu.Name}} {
		m, err := llama.LoadModel(path, p)
		if err != nil {
			t.Fatal(err)
		}
		prompt, err := m.Tokenize("Once upon a time", true, false)
		if err != nil {
			t.Fatal(err)
		}
		gens[i] = greedy(t, m, prompt, 60)
		// Log-probs of the generated tokens, teacher-forced in one batch.
		c := newCtx(t, m, llama.ContextParams{NCtx: 256, TypeK: llama.KVF32, TypeV: llama.KVF32, FlashAttn: llama.FlashAttnOff})
		all := append(append([]llama.Token{}, prompt...), gens[i]...)
		rows := decodeOne(t, c, all, 0)
		for k := len(prompt) - 1; k < len(all)-1; k++ {
			lps[i] = append(lps[i], logSoftmaxAt(rows[k], all[k+1]))
		}
		c.Close()
		m.Close()
	}
	if len(gens[0]) != len(gens[1]) {
		t.Fatalf("CPU generated %d tokens, %s %d", len(gens[0]), gpu.Name, len(gens[1]))
	}
	for k := range gens[0] {
		if gens[0][k] != gens[1][k] {
			t.Fatalf("token %d: CPU %d, %s %d", k, gens[0][k], gpu.Name, gens[1][k])
		}
	}
	d := 0.0
	for k := range lps[0] {
		d = math.Max(d, math.Abs(lps[0][k]-lps[1][k]))
	}
	t.Logf("stories260K on %s: %d greedy tokens identical to the CPU's, max |Δ log p| %.3g", gpu.Name, len(gens[0]), d)
	// lavapipe: 2.7e-3 with Vulkan's F16 products, 2.8e-6 without
	testutil.Bound(t, gpu, "max |Δ log p| against the CPU (one batch)", d, testutil.PrecisionBound(gpu, 1e-4, 1e-2))
}

func logSoftmaxAt(l []float32, tok llama.Token) float64 {
	mx := math.Inf(-1)
	for _, v := range l {
		mx = math.Max(mx, float64(v))
	}
	s := 0.0
	for _, v := range l {
		s += math.Exp(float64(v) - mx)
	}
	return float64(l[tok]) - mx - math.Log(s)
}

// writeTinyAdapter writes a LoRA adapter for the tiny model whose B matrices
// are not zero, so that it changes the logits.
func writeTinyAdapter(t *testing.T, m *llama.Model) string {
	t.Helper()
	dir := t.TempDir()
	fresh := filepath.Join(dir, "fresh.gguf")
	if err := train.CreateLoRA(m, fresh, train.Config{LoraRank: 4, LoraAlpha: 8, Seed: 5}); err != nil {
		t.Fatal(err)
	}
	a, err := llama.LoadAdapter(m, fresh)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for _, name := range a.TensorNames() {
		if strings.HasSuffix(name, ".lora_b") {
			p, err := a.Tensor(name)
			if err != nil {
				t.Fatal(err)
			}
			v := make([]float32, p.Len())
			for i := range v {
				v[i] = float32(i%11-5) * 0.02
			}
			p.Set(v)
		}
	}
	path := filepath.Join(dir, "adapter.gguf")
	if err := train.SaveLoRA(a, m.Architecture(), path); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestGPUBackwardOpsMatchCPU computes the ops of a training graph's backward
// pass, with the operand layouts it gives them, on the device and on the
// CPU (opcheck.CompareBackwardOps): each within F32 rounding, the matrix
// products within F16's where the device multiplies F32 matrices from F16
// copies. lavapipe before patch 0052: Vulkan's ACC of a permuted tensor off
// by 1.39 (1.15 in 4-d), which scrambled the query's gradient in every
// training step; before patch 0053, with GGML_VK_DISABLE_F16=1, the product
// of permuted operands off by about 3e-4.
func TestGPUBackwardOpsMatchCPU(t *testing.T) {
	gpu := testutil.GPU(t)
	diffs, err := opcheck.CompareBackwardOps(gpu.Name)
	if err != nil {
		t.Fatal(err)
	}
	if len(diffs) != 11 {
		t.Fatalf("%d ops compared, want 11: %v", len(diffs), diffs)
	}
	for _, d := range diffs {
		if !d.Supported {
			t.Logf("%s (%s): %s's backend declines it (the CPU computes it)", d.What, d.Op, gpu.Name)
			continue
		}
		t.Logf("%s (%s) on %s: relative error %.3g", d.What, d.Op, gpu.Name, d.RelErr)
	}
	for _, d := range diffs {
		if !d.Supported {
			if strings.HasPrefix(gpu.Name, "Vulkan") {
				t.Errorf("%s (%s): the Vulkan backend declines it; it runs all of these since patch 0052", d.What, d.Op)
			}
			continue
		}
		// lavapipe: every op but MUL_MAT within 1.1e-7; MUL_MAT 9.7e-8 and
		// 1.7e-7 in F32, 6.8e-4 and 2.6e-4 with Vulkan's F16 products
		bound := 1e-5
		if d.Op == "MUL_MAT" {
			bound = testutil.PrecisionBound(gpu, 1e-5, 3e-3)
		}
		testutil.Bound(t, gpu, d.What+" ("+d.Op+"), relative error against the CPU", d.RelErr, bound)
	}
}
