package train

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/rollout"
	"github.com/confclip/confclip/sampler"
	"github.com/confclip/confclip/testkit/testutil"
)

// llamacppPython is the llama-cpp-python anchor's interpreter (make
// llamacpp-venv) and its script.
var (
	llamacppPython = filepath.Join("..", "build", "llamacpp-venv", "bin", "python")
	llamacppScript = filepath.Join("..", "scripts", "llamacpp_generate.py")
)

// lcpReady is llamacpp_generate.py's first line.
type lcpReady struct {
	Version      string `json:"llama_cpp_python"`
	PromptTokens int    `json:"prompt_tokens"`
	SystemInfo   string `json:"system_info"`
}

// lcpProc is a running llamacpp_generate.py: the model loaded once, a
// round per line written.
type lcpProc struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Scanner
	stderr bytes.Buffer
	ready  lcpReady
}

func startLlamaCppPython(model, prompt string, group, maxTokens, threads int) (*lcpProc, error) {
	p := &lcpProc{}
	p.cmd = exec.Command(llamacppPython, llamacppScript, "--model", model, "--prompt", prompt,
		"--group", strconv.Itoa(group), "--max-tokens", strconv.Itoa(maxTokens), "--threads", strconv.Itoa(threads))
	p.cmd.Stderr = &p.stderr
	var err error
	if p.in, err = p.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	p.out = bufio.NewScanner(stdout)
	if err := p.read(&p.ready); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

// read decodes the next line of the script's output into v.
func (p *lcpProc) read(v any) error {
	if !p.out.Scan() {
		return fmt.Errorf("%s ended: %s", llamacppScript, strings.TrimSpace(p.stderr.String()))
	}
	return json.Unmarshal(p.out.Bytes(), v)
}

// round samples one group and returns its tokens and seconds, prompt
// included.
func (p *lcpProc) round(seed int) (tokens int, seconds float64, err error) {
	if _, err := fmt.Fprintf(p.in, "%d\n", seed); err != nil {
		return 0, 0, err
	}
	var r struct {
		Tokens  int     `json:"tokens"`
		Seconds float64 `json:"seconds"`
	}
	if err := p.read(&r); err != nil {
		return 0, 0, err
	}
	return r.Tokens, r.Seconds, nil
}

func (p *lcpProc) close() {
	p.in.Close()
	_ = p.cmd.Wait() // its output was read; an exit status after that changes nothing measured
}

// lcpMissingFeatures lists the CPU features this machine has that the
// anchor's llama.cpp was built without (its system_info says "AVX2 = 1"
// for each it compiled in): an anchor without them is not at its best.
func lcpMissingFeatures(systemInfo string) []string {
	var missing []string
	for _, f := range []struct{ cpu, ggml string }{{"avx2", "AVX2"}, {"fma", "FMA"}, {"avx512f", "AVX512"},
		{"avx512_vnni", "AVX512_VNNI"}, {"avx512_bf16", "AVX512_BF16"}} {
		if cpuFlag(f.cpu) && !strings.Contains(systemInfo, f.ggml+" = 1") {
			missing = append(missing, f.ggml)
		}
	}
	return missing
}

// BenchmarkAgainstLlamaCppPython is docs/speed.md's second anchor for the
// rollout, beside the C loop: G = 8 sampled completions of 128 tokens of one
// prompt at temperature 1 with each token's log-probability, through
// llama-cpp-python (scripts/llamacpp_generate.py in build/llamacpp-venv:
// the same llama.cpp commit without confclip's patches, its low-level API,
// llama.cpp's sampler chain and default context: F16 KV cache, flash
// attention auto) against the engine, on its own settings and on
// llama.cpp's defaults, on bench-100m (F32, Q8_0, Q4_K_M) and the real
// models make real-models fetches, at 1 and 2 threads. Three rounds a side,
// alternating, each side keeping its best; without the venv it prints NOT
// RUN. A round's rate depends on how many of its sequences are still going
// (a finished one leaves the batch), so the real models continue a story,
// which they seldom end within 128 tokens, where bench-100m's random
// weights answer a question; the table gives each side's mean tokens a
// round, 1,024 at most.
func BenchmarkAgainstLlamaCppPython(b *testing.B) {
	if _, err := os.Stat(llamacppPython); err != nil {
		b.Skipf("NOT RUN: %s is absent; `make llamacpp-venv` makes it", llamacppPython)
	}
	const group, gen = 8, 128
	const question, story = "What is 12+7? Answer:", "Once upon a time, in a small village by the sea, there lived"
	type model struct{ name, path, text string }
	var models []model
	for _, q := range []string{"", "q8_0", "q4_k_m"} {
		models = append(models, model{"bench-100m " + speedTypeName(q), speedModel(b, q), question})
	}
	for _, r := range []struct{ name, file string }{{"SmolLM2-135M-Instruct Q4_1", "smollm2-135m-instruct"}, {"Gemma 3 270M Q4_K_M", "gemma3-270m"}} {
		p := filepath.Join("..", "build", "models", r.file+".gguf")
		if _, err := os.Stat(p); err != nil {
			fmt.Printf("llama-cpp-python comparison: NOT RUN on %s (%s is absent; make real-models fetches it)\n", r.name, p)
			continue
		}
		models = append(models, model{r.name, p, story})
	}
	threads := []int{1}
	if runtime.NumCPU() > 1 {
		threads = append(threads, 2)
	}
	var ready lcpReady
	var table bytes.Buffer
	fmt.Fprintln(&table, "| model | threads | llama-cpp-python (F16 KV, flash attention auto) | confclip, its settings (F32 KV, flash attention on) | confclip / llama-cpp-python | confclip on llama.cpp's defaults | / llama-cpp-python | tokens a round: llama-cpp-python / confclip / confclip on defaults |")
	fmt.Fprintln(&table, "|---|---:|---:|---:|---:|---:|---:|---:|")
	b.ResetTimer()
	for _, md := range models {
		m, err := llama.LoadModel(md.path, llama.ModelParams{})
		if err != nil {
			b.Fatal(err)
		}
		prompt, err := m.Tokenize(md.text, true, false)
		if err != nil {
			b.Fatal(err)
		}
		for _, t := range threads {
			lcp, err := startLlamaCppPython(md.path, md.text, group, gen, t)
			if err != nil {
				b.Fatalf("%s: %v", md.name, err)
			}
			ready = lcp.ready
			if miss := lcpMissingFeatures(ready.SystemInfo); len(miss) > 0 {
				lcp.close()
				b.Skipf("NOT RUN: llama-cpp-python's llama.cpp was built without %s, which this CPU has (system info: %s)", strings.Join(miss, ", "), ready.SystemInfo)
			}
			if ready.PromptTokens != len(prompt) {
				b.Fatalf("%s: llama-cpp-python tokenized the prompt into %d tokens, confclip into %d", md.name, ready.PromptTokens, len(prompt))
			}
			nctx := group * (len(prompt) + gen + 8)
			engine := func(kv, fa string) *rollout.Engine {
				e, err := rollout.NewEngine(m, rollout.Options{Group: group, MaxTokens: gen, Parallel: group, NCtx: nctx, Seed: 1,
					Threads: t, Params: sampler.Params{Temperature: 1}, KVType: kv, FlashAttn: fa})
				if err != nil {
					b.Fatal(err)
				}
				return e
			}
			ours, dflt := engine("", ""), engine("f16", "auto")
			sample := func(e *rollout.Engine) func() (int, float64) {
				return func() (int, float64) {
					st, err := e.Generate(context.Background(), []dataset.Prompt{{ID: "bench", Prompt: md.text}}, func([]dataset.Rollout) error { return nil })
					if err != nil {
						b.Fatal(err)
					}
					return st.Tokens, st.Elapsed.Seconds()
				}
			}
			seed := 0
			runLCP := func() (int, float64) {
				seed++
				n, s, err := lcp.round(seed)
				if err != nil {
					b.Fatalf("%s: %v", md.name, err)
				}
				return n, s
			}
			sides := []func() (int, float64){runLCP, sample(ours), sample(dflt)}
			best := make([]float64, len(sides))
			tokens := make([]int, len(sides))
			for _, s := range sides {
				s() // warm up
			}
			const rounds = 3
			for round := range rounds {
				for i := range sides {
					k := i
					if round%2 == 1 {
						k = len(sides) - 1 - i
					}
					n, s := sides[k]()
					best[k] = max(best[k], float64(n)/s)
					tokens[k] += n
				}
			}
			lcp.close()
			ours.Close()
			dflt.Close()
			fmt.Fprintf(&table, "| %s | %d | %.0f | %.0f | %.2f | %.0f | %.2f | %d / %d / %d |\n", md.name, t, best[0], best[1], best[1]/best[0], best[2], best[2]/best[0],
				tokens[0]/rounds, tokens[1]/rounds, tokens[2]/rounds)
			b.ReportMetric(best[1]/best[0], fmt.Sprintf("ratio-%s-%dt", strings.ReplaceAll(md.name, " ", "_"), t))
		}
		m.Close()
	}
	b.StopTimer()
	var out bytes.Buffer
	fmt.Fprintf(&out, "G = 8 x 128 tokens sampled at temperature 1 with each token's log-probability (bench-100m: %q; the real models: %q); tokens/s, prompt included, best of 3 alternating rounds; load average at the end %s.\n", question, story, testutil.LoadAverage())
	fmt.Fprintf(&out, "llama-cpp-python %s (llama.cpp %s, built from the same source distribution without confclip's patches); its llama.cpp: %s\n\n", ready.Version, llama.LlamaCommit, ready.SystemInfo)
	out.Write(table.Bytes())
	fmt.Printf("\nconfclip against llama-cpp-python:\n\n%s\n", out.String())
	if *speedMD != "" {
		if err := testutil.RewriteMarked(*speedMD, "llama-cpp-python table", out.String()); err != nil {
			b.Fatal(err)
		}
	}
}
