package train

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/safetensors"
)

func adapterValues(t *testing.T, a *llama.Adapter) (names []string, vals map[string][]float32, shapes map[string][]int64) {
	t.Helper()
	ps, _, err := AdapterParams(a)
	if err != nil {
		t.Fatal(err)
	}
	vals, shapes = map[string][]float32{}, map[string][]int64{}
	for _, p := range ps {
		v := make([]float32, p.Len())
		p.Get(v)
		names = append(names, p.Name)
		vals[p.Name], shapes[p.Name] = v, p.Shape
	}
	return names, vals, shapes
}

// GGUF → PEFT → GGUF gives the same tensors, bit for bit, and the same
// log-probs through llama.cpp; the PEFT side has Hugging Face's names,
// shapes and (for llama's q and k) row order.
func TestPEFTRoundTrip(t *testing.T) {
	m := load(t, false)
	dir := t.TempDir()
	a := newAdapter(t, m, true) // random A and B
	src := filepath.Join(dir, "src.gguf")
	if err := SaveLoRA(a, m.Architecture(), src); err != nil {
		t.Fatal(err)
	}
	peft := filepath.Join(dir, "peft")
	sum, err := ExportPEFT(m, src, peft, "")
	if err != nil {
		t.Fatal(err)
	}
	info := m.Info()
	names, vals, shapes := adapterValues(t, a)
	if sum.Rank != 4 || sum.Alpha != 8 || sum.Tensors != len(names) || len(names) != 2*7*info.Layers {
		t.Errorf("export summary %+v", sum)
	}

	// adapter_config.json as PEFT's LoraConfig reads it.
	var cfg map[string]any
	b, err := os.ReadFile(filepath.Join(peft, PEFTConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	mods, _ := cfg["target_modules"].([]any)
	var got []string
	for _, x := range mods {
		got = append(got, x.(string))
	}
	want := []string{"down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"}
	if cfg["peft_type"] != "LORA" || cfg["r"] != 4.0 || cfg["lora_alpha"] != 8.0 || !slices.Equal(got, want) {
		t.Errorf("adapter_config.json: %s", b)
	}

	// The safetensors tensors: every HF name, F32, PEFT's shapes.
	st, err := safetensors.ReadFile(filepath.Join(peft, PEFTWeights))
	if err != nil {
		t.Fatal(err)
	}
	var hfNames []string
	for _, tn := range st.Tensors {
		hfNames = append(hfNames, tn.Name)
	}
	sort.Strings(hfNames)
	var wantNames []string
	hf := map[string]string{"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
		"ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
	for _, n := range names {
		l, tg, isA, err := parseGGUFLoRAName(n)
		if err != nil || hf[tg] == "" {
			t.Fatalf("adapter tensor %s: %v", n, err)
		}
		wantNames = append(wantNames, fmt.Sprintf("base_model.model.model.layers.%d.%s.lora_%s.weight", l, hf[tg], map[bool]string{true: "A", false: "B"}[isA]))
	}
	sort.Strings(wantNames)
	if !slices.Equal(hfNames, wantNames) {
		t.Fatalf("safetensors names %v, want %v", hfNames, wantNames)
	}
	headDim := info.Embd / info.Heads
	for _, gname := range names {
		l, tg, isA, _ := parseGGUFLoRAName(gname)
		ab := map[bool]string{true: "a", false: "b"}[isA]
		tn, _ := st.Get(fmt.Sprintf("base_model.model.model.layers.%d.%s.lora_%s.weight", l, hf[tg], strings.ToUpper(ab)))
		gs := shapes[gname]
		if tn.DType != "F32" || !slices.Equal(tn.Shape, []int64{gs[1], gs[0]}) {
			t.Errorf("%s: %s %v, want F32 %v", tn.Name, tn.DType, tn.Shape, []int64{gs[1], gs[0]})
		}
		v, _ := tn.Float32s()
		gv, cols := vals[gname], int(gs[0])
		permuted := ab == "b" && (tg == "attn_q" || tg == "attn_k")
		for row := range int(gs[1]) {
			// llama.cpp's row for this HF row: within a head of d
			// rows, HF row j*d/2+i is GGUF row 2i+j.
			g := row
			if permuted {
				h, r := row/headDim, row%headDim
				j, i := r/(headDim/2), r%(headDim/2)
				g = h*headDim + 2*i + j
			}
			if !slices.Equal(v[row*cols:(row+1)*cols], gv[g*cols:(g+1)*cols]) {
				t.Fatalf("%s row %d is not GGUF row %d", tn.Name, row, g)
			}
		}
	}

	// Back to GGUF: the same tensors in the same order, bit for bit.
	back := filepath.Join(dir, "back.gguf")
	if _, err := ImportPEFT(m, peft, back); err != nil {
		t.Fatal(err)
	}
	a2, err := llama.LoadAdapter(m, back)
	if err != nil {
		t.Fatal(err)
	}
	defer a2.Close()
	names2, vals2, shapes2 := adapterValues(t, a2)
	if !slices.Equal(names, names2) || a2.Alpha() != a.Alpha() {
		t.Fatalf("tensors %v (alpha %g), want %v (alpha %g)", names2, a2.Alpha(), names, a.Alpha())
	}
	for _, n := range names {
		if !slices.Equal(vals[n], vals2[n]) || !slices.Equal(shapes[n], shapes2[n]) {
			t.Errorf("%s changed in the round trip", n)
		}
	}
	// The same log-probs through llama.cpp, and not those of the base model.
	moved := 0.0
	for _, e := range examples(t, m) {
		l1, l2, base := decodeLogProbs(t, m, a, e), decodeLogProbs(t, m, a2, e), decodeLogProbs(t, m, nil, e)
		if !slices.Equal(l1, l2) {
			t.Errorf("log-probs %v after the round trip, want %v", l2, l1)
		}
		for i := range base {
			moved = max(moved, abs(l1[i]-base[i]))
		}
	}
	if moved < 1e-3 {
		t.Errorf("the adapter moves the log-probs by only %g: the test would not see a wrong conversion", moved)
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// A PEFT folder imports, trains a step, and exports again with the step's
// change in it.
func TestPEFTImportTrainExport(t *testing.T) {
	m := load(t, false)
	dir := t.TempDir()
	a := newAdapter(t, m, true)
	src := filepath.Join(dir, "src.gguf")
	if err := SaveLoRA(a, m.Architecture(), src); err != nil {
		t.Fatal(err)
	}
	peft := filepath.Join(dir, "peft")
	if _, err := ExportPEFT(m, src, peft, ""); err != nil {
		t.Fatal(err)
	}
	imported := filepath.Join(dir, "imported.gguf")
	if _, err := ImportPEFT(m, peft, imported); err != nil {
		t.Fatal(err)
	}
	ai, err := llama.LoadAdapter(m, imported)
	if err != nil {
		t.Fatal(err)
	}
	defer ai.Close()
	tr, err := NewLoRATrainer(m, ai, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Step(context.Background(), examples(t, m)); err != nil {
		t.Fatal(err)
	}
	tr.Close()
	trained := filepath.Join(dir, "trained.gguf")
	if err := SaveLoRA(ai, m.Architecture(), trained); err != nil {
		t.Fatal(err)
	}
	peft2 := filepath.Join(dir, "peft2")
	if _, err := ExportPEFT(m, trained, peft2, ""); err != nil {
		t.Fatal(err)
	}
	before, err := safetensors.ReadFile(filepath.Join(peft, PEFTWeights))
	if err != nil {
		t.Fatal(err)
	}
	after, err := safetensors.ReadFile(filepath.Join(peft2, PEFTWeights))
	if err != nil {
		t.Fatal(err)
	}
	changed := 0
	for _, tb := range before.Tensors {
		ta, ok := after.Get(tb.Name)
		if !ok {
			t.Fatalf("%s missing after training", tb.Name)
		}
		if !slices.Equal(ta.Data, tb.Data) {
			changed++
		}
	}
	if changed == 0 {
		t.Error("a training step changed no tensor of the exported adapter")
	}
}

func TestPEFTImportRejects(t *testing.T) {
	m := load(t, false)
	info := m.Info()
	write := func(t *testing.T, cfg string, tensors []safetensors.Tensor) string {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, PEFTConfigFile), []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		if tensors != nil {
			if err := safetensors.WriteFile(filepath.Join(dir, PEFTWeights), tensors, nil); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	good := `{"peft_type":"LORA","r":2,"lora_alpha":4,"target_modules":["v_proj"]}`
	e := int64(info.Embd)
	kv := e / int64(info.Heads) * int64(info.HeadsKV)
	a := safetensors.F32("base_model.model.model.layers.0.self_attn.v_proj.lora_A.weight", []int64{2, e}, make([]float32, 2*e))
	b := safetensors.F32("base_model.model.model.layers.0.self_attn.v_proj.lora_B.weight", []int64{kv, 2}, make([]float32, 2*kv))
	out := filepath.Join(t.TempDir(), "x.gguf")
	if _, err := ImportPEFT(m, write(t, good, []safetensors.Tensor{a, b}), out); err != nil {
		t.Fatalf("a hand-written PEFT adapter: %v", err)
	}
	wrongB := safetensors.F32(b.Name, []int64{kv + 1, 2}, make([]float32, 2*(kv+1)))
	embed := safetensors.F32("base_model.model.model.embed_tokens.lora_A.weight", []int64{2, 4}, make([]float32, 8))
	for name, tc := range map[string]struct {
		cfg     string
		tensors []safetensors.Tensor
		want    string
	}{
		"dora":        {`{"peft_type":"LORA","r":2,"lora_alpha":4,"use_dora":true}`, []safetensors.Tensor{a, b}, "use_dora"},
		"not lora":    {`{"peft_type":"IA3","r":2,"lora_alpha":4}`, []safetensors.Tensor{a, b}, "IA3"},
		"wrong shape": {good, []safetensors.Tensor{a, wrongB}, "do not fit"},
		"only A":      {good, []safetensors.Tensor{a}, "only one"},
		"embeddings":  {good, []safetensors.Tensor{a, b, embed}, "embed_tokens"},
		"no weights":  {good, nil, "adapter_model.safetensors"},
	} {
		_, err := ImportPEFT(m, write(t, tc.cfg, tc.tensors), out)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %q", name, err, tc.want)
		}
	}
}

func TestRotaryRowOrder(t *testing.T) {
	// 2 heads of 4 rows, 1 column: HF rows [h0: a0 a1 b0 b1] (two halves)
	// are llama.cpp's [a0 b0 a1 b1] (interleaved pairs).
	hfRows := []float32{0, 1, 2, 3, 10, 11, 12, 13}
	gg, err := permuteRows(hfRows, 8, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	if want := []float32{0, 2, 1, 3, 10, 12, 11, 13}; !slices.Equal(gg, want) {
		t.Errorf("permuted %v, want %v", gg, want)
	}
	back, _ := unpermuteRows(gg, 8, 1, 2)
	if !slices.Equal(back, hfRows) {
		t.Errorf("unpermuted %v", back)
	}
	if _, err := permuteRows(hfRows, 8, 1, 3); err == nil {
		t.Error("8 rows in 3 heads accepted")
	}
}
