package llama_test

import (
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/modelgen"
	"github.com/confclip/confclip/testkit/testutil"
)

// variantRun is what a child process of TestCPUVariantsAgree reports.
type variantRun struct {
	Variant string                          `json:"variant"`
	Logits  map[string]map[string][]float32 `json:"logits"` // arch, decode config: every logit
}

// TestCPUVariantsAgree: in a build with several sets of CPU kernels (make
// PORTABLE=1 on x86-64), CONFCLIP_CPU_VARIANT picks each one this CPU can
// run (each in a child process: the choice is made once, at start), and every
// one decodes every generated architecture to the logits of the variant
// chosen by default, within TestDecodeUnchanged's cross-CPU bounds (the
// variants are the kernels other CPUs run). A variant this CPU cannot run
// falls back to the default choice, which the child reports.
func TestCPUVariantsAgree(t *testing.T) {
	if out := os.Getenv("CONFCLIP_VARIANT_OUT"); out != "" {
		r := variantRun{Logits: map[string]map[string][]float32{}}
		r.Variant, _ = llama.CPUVariant()
		for _, arch := range modelgen.Archs {
			m, err := llama.LoadModel(testutil.ArchModel(t, arch), llama.ModelParams{})
			if err != nil {
				t.Fatalf("%s: %v", arch, err)
			}
			r.Logits[arch] = map[string][]float32{}
			for name, p := range decodeConfigs {
				for _, l := range decodeLogits(t, m, p) {
					r.Logits[arch][name] = append(r.Logits[arch][name], l...)
				}
			}
			m.Close()
		}
		data, _ := json.Marshal(r)
		if err := os.WriteFile(out, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	chosen, built := llama.CPUVariant()
	if chosen == "" {
		t.Skip("NOT RUN: this build has one set of CPU kernels (make PORTABLE=1 on x86-64 builds several)")
	}
	run := func(variant string) variantRun {
		t.Helper()
		out := filepath.Join(t.TempDir(), "run.json")
		cmd := exec.Command(os.Args[0], "-test.run=^TestCPUVariantsAgree$", "-test.count=1")
		cmd.Env = append(os.Environ(), "CONFCLIP_VARIANT_OUT="+out, "CONFCLIP_CPU_VARIANT="+variant)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("CONFCLIP_CPU_VARIANT=%s: %v\n%s", variant, err, b)
		}
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		var r variantRun
		if err := json.Unmarshal(data, &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	ref := run(chosen)
	if ref.Variant != chosen {
		t.Fatalf("CONFCLIP_CPU_VARIANT=%s gave variant %q", chosen, ref.Variant)
	}
	ran := 0
	for _, v := range built {
		r := run(v)
		if r.Variant != v {
			t.Logf("%s: this CPU cannot run it (the child chose %s)", v, r.Variant)
			if r.Variant != chosen {
				t.Errorf("%s: the fallback was %s, not the default choice %s", v, r.Variant, chosen)
			}
			continue
		}
		ran++
		for _, arch := range modelgen.Archs {
			for name := range decodeConfigs {
				g, w := r.Logits[arch][name], ref.Logits[arch][name]
				if len(g) != len(w) || len(w) == 0 {
					t.Fatalf("%s, %s, %s: %d logits, %s gave %d", v, arch, name, len(g), chosen, len(w))
				}
				worst := 0.0
				for k := range w {
					d := math.Abs(float64(g[k]-w[k])) / math.Max(1, math.Abs(float64(w[k])))
					if d > worst || math.IsNaN(d) {
						worst = d
					}
				}
				t.Logf("%s against %s, %s, %s decoding: largest difference %.3g", v, chosen, arch, name, worst)
				if bound := crossCPUBound[name]; worst > bound || math.IsNaN(worst) {
					t.Errorf("%s against %s, %s, %s decoding: largest difference %.3g over the cross-CPU bound %g", v, chosen, arch, name, worst, bound)
				}
			}
		}
	}
	if ran < 2 {
		t.Errorf("only %d of the variants %v ran on this CPU: want the baseline x64 and the chosen one at least", ran, built)
	}
}

// TestNoAMXKernels: no build carries ggml's AMX kernels. On a CPU with
// AMX-INT8, a native build with them took Q4_0, Q4_1, Q8_0 and K-quant
// weights into ggml's AMX buffer and died with SIGSEGV in
// ggml_backend_amx_mul_mat on the first forward pass of SmolLM2's Q4_1
// file (llama.cpp issue 20824): CMakeLists.txt compiles the CPU backend
// with -mno-amx-*. The system line says which kernels were compiled in,
// whatever the CPU.
func TestNoAMXKernels(t *testing.T) {
	info := llama.SystemInfo()
	if strings.Contains(info, "AMX_INT8 = 1") {
		t.Fatalf("the build carries ggml's AMX kernels (llama.cpp issue 20824):\n%s", info)
	}
}
