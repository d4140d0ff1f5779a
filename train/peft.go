package train

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/confclip/confclip/internal/atomicfile"
	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/safetensors"
)

// PEFT's LoRA layout, the Python side's (adapter_model.safetensors +
// adapter_config.json), against llama.cpp's GGUF LoRA:
//
//   - names: GGUF "blk.N.attn_q.weight.lora_a" is PEFT
//     "base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight";
//   - shapes: GGUF lora_a has ggml dimensions [n_in, r], which is the
//     row-major [r, n_in] of PEFT's lora_A; lora_b [r, n_out] is PEFT's
//     lora_B [n_out, r]. The bytes are the same, only the shape is written
//     the other way round;
//   - llama-family rotary embeddings: llama.cpp's converter (convert_hf_to_gguf.py,
//     LlamaModel.permute, applied to LoRA's B by convert_lora_to_gguf.py)
//     reorders the output rows of q_proj and k_proj within each head from
//     Hugging Face's two halves to interleaved pairs. Export undoes that
//     and import does it;
//   - scale: both apply alpha/r (llama.cpp per tensor, from its rank).

// PEFT file names inside an adapter folder.
const (
	PEFTWeights    = "adapter_model.safetensors"
	PEFTConfigFile = "adapter_config.json"
)

// peftArch is how one architecture's GGUF blocks map onto Hugging Face
// module names.
type peftArch struct {
	modules map[string]string // GGUF name within a block → HF module path within a layer
	// permuteQK: llama.cpp's converter interleaves the rotary halves of q
	// and k (LlamaModel); the other families keep Hugging Face's order.
	permuteQK bool
}

var hfModules = map[string]string{
	"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
	"ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}

// phi3Modules: Phi-3 keeps q, k and v in one qkv_proj and gate and up in
// one gate_up_proj, which llama.cpp's converter writes as they are
// (attn_qkv, and ffn_up of twice the feed-forward size).
var phi3Modules = map[string]string{
	"attn_qkv": "self_attn.qkv_proj", "attn_output": "self_attn.o_proj",
	"ffn_up": "mlp.gate_up_proj", "ffn_down": "mlp.down_proj",
}

// peftArchs are the architectures whose adapters convert: llama (which
// llama.cpp also uses for Mistral and other llama-shaped models), and the
// Qwen, Gemma and Phi-3 families, whose converters keep Hugging Face's row
// order.
var peftArchs = map[string]peftArch{
	"llama":  {modules: hfModules, permuteQK: true},
	"qwen2":  {modules: hfModules},
	"qwen3":  {modules: hfModules},
	"gemma2": {modules: hfModules},
	"gemma3": {modules: hfModules},
	"phi3":   {modules: phi3Modules},
}

// PEFTArchitectures lists the architectures ExportPEFT and ImportPEFT take.
func PEFTArchitectures() []string {
	names := make([]string, 0, len(peftArchs))
	for n := range peftArchs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func archOf(m *llama.Model) (peftArch, string, error) {
	arch := m.Architecture()
	a, ok := peftArchs[arch]
	if !ok {
		return a, arch, fmt.Errorf("%s: architecture %q: PEFT conversion knows %v", m.Path(), arch, PEFTArchitectures())
	}
	return a, arch, nil
}

// PEFTConfig is the part of adapter_config.json that the conversion writes
// and reads (PEFT's LoraConfig fields).
type PEFTConfig struct {
	PeftType          string             `json:"peft_type"`
	TaskType          string             `json:"task_type"`
	BaseModel         string             `json:"base_model_name_or_path"`
	R                 int                `json:"r"`
	LoraAlpha         float64            `json:"lora_alpha"`
	TargetModules     []string           `json:"target_modules"`
	LoraDropout       float64            `json:"lora_dropout"`
	Bias              string             `json:"bias"`
	FanInFanOut       bool               `json:"fan_in_fan_out"`
	UseRSLoRA         bool               `json:"use_rslora"`
	UseDoRA           bool               `json:"use_dora"`
	InitLoraWeights   bool               `json:"init_lora_weights"`
	InferenceMode     bool               `json:"inference_mode"`
	RankPattern       map[string]int     `json:"rank_pattern"`
	AlphaPattern      map[string]float64 `json:"alpha_pattern"`
	ModulesToSave     []string           `json:"modules_to_save"`
	LayersToTransform []int              `json:"layers_to_transform"`
}

// PEFTSummary says what a conversion wrote.
type PEFTSummary struct {
	Arch    string
	Tensors int // LoRA matrices (A and B count separately)
	Rank    int
	Alpha   float64
	Targets []string // HF module names (q_proj, ...)
}

// ExportPEFT converts a GGUF LoRA adapter of the model into a PEFT adapter
// folder: dir/adapter_model.safetensors (F32) and dir/adapter_config.json,
// whose base_model_name_or_path is baseModel, or "" for BaseModelName's.
func ExportPEFT(m *llama.Model, adapterPath, dir, baseModel string) (PEFTSummary, error) {
	var sum PEFTSummary
	arch, archName, err := archOf(m)
	if err != nil {
		return sum, err
	}
	sum.Arch = archName
	a, err := llama.LoadAdapter(m, adapterPath)
	if err != nil {
		return sum, err
	}
	defer a.Close()
	ps, alpha, err := AdapterParams(a)
	if err != nil {
		return sum, err
	}
	info := m.Info()
	var tensors []safetensors.Tensor
	ranks := map[string]int{} // HF module path (no prefix) → rank
	targets := map[string]bool{}
	for _, p := range ps {
		layer, weight, isA, err := parseGGUFLoRAName(p.Name)
		if err != nil {
			return sum, fmt.Errorf("%s: %w", adapterPath, err)
		}
		mod, ok := arch.modules[weight]
		if !ok {
			return sum, fmt.Errorf("%s: tensor %s adapts %s, which has no PEFT name for %s", adapterPath, p.Name, weight, archName)
		}
		if len(p.Shape) != 2 {
			return sum, fmt.Errorf("%s: tensor %s has %d dimensions, want 2", adapterPath, p.Name, len(p.Shape))
		}
		v := make([]float32, p.Len())
		if err := p.Get(v); err != nil {
			return sum, err
		}
		path := fmt.Sprintf("model.layers.%d.%s", layer, mod)
		// ggml [ne0, ne1] is row-major [ne1, ne0].
		shape := []int64{p.Shape[1], p.Shape[0]}
		kind := "lora_B"
		if isA {
			kind = "lora_A"
			ranks[path] = int(p.Shape[1])
		} else if arch.permuteQK && (weight == "attn_q" || weight == "attn_k") {
			heads := info.Heads
			if weight == "attn_k" {
				heads = info.HeadsKV
			}
			if v, err = unpermuteRows(v, int(shape[0]), int(shape[1]), heads); err != nil {
				return sum, fmt.Errorf("%s: %s: %w", adapterPath, p.Name, err)
			}
		}
		targets[mod[strings.LastIndexByte(mod, '.')+1:]] = true
		tensors = append(tensors, safetensors.F32("base_model.model."+path+"."+kind+".weight", shape, v))
	}
	sum.Tensors = len(tensors)
	cfg := PEFTConfig{PeftType: "LORA", TaskType: "CAUSAL_LM", BaseModel: cmp.Or(baseModel, BaseModelName(m)), LoraAlpha: alpha,
		Bias: "none", InitLoraWeights: true, InferenceMode: true, RankPattern: map[string]int{}, AlphaPattern: map[string]float64{}}
	if err := cfg.setRanks(ranks, alpha); err != nil {
		return sum, fmt.Errorf("%s: %w", adapterPath, err)
	}
	for t := range targets {
		cfg.TargetModules = append(cfg.TargetModules, t)
	}
	sort.Strings(cfg.TargetModules)
	sum.Rank, sum.Alpha, sum.Targets = cfg.R, cfg.LoraAlpha, cfg.TargetModules

	if err := os.MkdirAll(dir, 0o755); err != nil {
		return sum, err
	}
	if err := safetensors.WriteFile(filepath.Join(dir, PEFTWeights), tensors, map[string]string{"format": "pt"}); err != nil {
		return sum, err
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return sum, err
	}
	return sum, atomicfile.WriteBytes(filepath.Join(dir, PEFTConfigFile), append(b, '\n'))
}

// setRanks sets r, rank_pattern and lora_alpha from each module's rank
// (HF module path, no prefix) and the adapter's alpha (0: absent). The most
// common rank is r; others go to rank_pattern, as PEFT does.
func (cfg *PEFTConfig) setRanks(ranks map[string]int, alpha float64) error {
	count := map[int]int{}
	for _, r := range ranks {
		count[r]++
	}
	for r, n := range count {
		if n > count[cfg.R] || n == count[cfg.R] && r < cfg.R {
			cfg.R = r
		}
	}
	for path, r := range ranks {
		if r != cfg.R {
			cfg.RankPattern[path] = r
		}
	}
	if alpha == 0 {
		// llama.cpp applies scale 1 when alpha is absent: alpha = r does too.
		cfg.LoraAlpha = float64(cfg.R)
		if len(cfg.RankPattern) > 0 {
			return errors.New("no alpha and ranks that differ: PEFT cannot express llama.cpp's scale 1 for each")
		}
	}
	return nil
}

// ImportPEFT converts a PEFT LoRA adapter folder for the model into
// llama.cpp's GGUF LoRA format at out. Every tensor must adapt one of the
// model's block weights (Targets) with the shape that weight asks for.
func ImportPEFT(m *llama.Model, dir, out string) (PEFTSummary, error) {
	var sum PEFTSummary
	arch, archName, err := archOf(m)
	if err != nil {
		return sum, err
	}
	sum.Arch = archName
	cfgPath := filepath.Join(dir, PEFTConfigFile)
	b, err := os.ReadFile(cfgPath)
	if err != nil {
		return sum, err
	}
	var cfg PEFTConfig
	if err := json.Unmarshal(b, &cfg); err != nil {
		return sum, fmt.Errorf("%s: %w", cfgPath, err)
	}
	if err := checkPEFTConfig(cfg); err != nil {
		return sum, fmt.Errorf("%s: %w", cfgPath, err)
	}
	wPath := filepath.Join(dir, PEFTWeights)
	if _, err := os.Stat(wPath); err != nil {
		if _, binErr := os.Stat(filepath.Join(dir, "adapter_model.bin")); binErr == nil {
			return sum, fmt.Errorf("%s: only adapter_model.bin (a pickle, which is not read): save the adapter with safe_serialization=True", dir)
		}
		return sum, err
	}
	st, err := safetensors.ReadFile(wPath)
	if err != nil {
		return sum, err
	}
	// The rank of each module: PEFT's r unless rank_pattern says otherwise;
	// scale = alpha / rank. llama.cpp keeps one alpha and takes each
	// tensor's rank, so alpha_pattern cannot be kept unless it is uniform.
	alpha := cfg.LoraAlpha
	if cfg.UseRSLoRA {
		// rsLoRA scales by alpha/sqrt(r): the same scale is (alpha*sqrt(r))/r.
		if len(cfg.RankPattern) > 0 {
			return sum, fmt.Errorf("%s: use_rslora with rank_pattern: llama.cpp's single alpha cannot give each rank its scale", cfgPath)
		}
		alpha = cfg.LoraAlpha * math.Sqrt(float64(cfg.R))
	}

	type pair struct{ a, b *safetensors.Tensor }
	pairs := map[string]*pair{} // GGUF weight name → its A and B
	for i := range st.Tensors {
		t := &st.Tensors[i]
		layer, weight, isA, err := parsePEFTName(t.Name, arch)
		if err != nil {
			return sum, fmt.Errorf("%s: %w", wPath, err)
		}
		name := fmt.Sprintf("blk.%d.%s.weight", layer, weight)
		p := pairs[name]
		if p == nil {
			p = &pair{}
			pairs[name] = p
		}
		if isA {
			p.a = t
		} else {
			p.b = t
		}
	}
	info := m.Info()
	w := newAdapterWriter(archName, alpha)
	defer w.Close()
	targets := map[string]bool{}
	for _, name := range orderedWeights(pairs, info.Layers) {
		p := pairs[name]
		if p.a == nil || p.b == nil {
			return sum, fmt.Errorf("%s: %s has only one of lora_A and lora_B", wPath, name)
		}
		shape, err := m.WeightShape(name)
		if err != nil {
			return sum, fmt.Errorf("%s: the adapter adapts %s, which the model %s does not have", wPath, name, m.Path())
		}
		nIn, nOut := shape[0], shape[1]
		if len(p.a.Shape) != 2 || len(p.b.Shape) != 2 {
			return sum, fmt.Errorf("%s: %s: lora_A %v and lora_B %v: want two dimensions each", wPath, name, p.a.Shape, p.b.Shape)
		}
		r := p.a.Shape[0]
		if p.a.Shape[1] != nIn || p.b.Shape[0] != nOut || p.b.Shape[1] != r || r < 1 {
			return sum, fmt.Errorf("%s: %s: lora_A %v and lora_B %v do not fit the model's weight [%d, %d] (out, in)", wPath, name, p.a.Shape, p.b.Shape, nOut, nIn)
		}
		av, err := p.a.Float32s()
		if err != nil {
			return sum, fmt.Errorf("%s: %w", wPath, err)
		}
		bv, err := p.b.Float32s()
		if err != nil {
			return sum, fmt.Errorf("%s: %w", wPath, err)
		}
		_, weight, _, err := parseGGUFLoRAName(name + ".lora_a")
		if err != nil {
			return sum, fmt.Errorf("%s: %w", wPath, err)
		}
		if arch.permuteQK && (weight == "attn_q" || weight == "attn_k") {
			heads := info.Heads
			if weight == "attn_k" {
				heads = info.HeadsKV
			}
			if bv, err = permuteRows(bv, int(nOut), int(r), heads); err != nil {
				return sum, fmt.Errorf("%s: %s: %w", wPath, name, err)
			}
		}
		an, bn := loraNames(name)
		w.AddTensorF32(an, []int64{nIn, r}, av)
		w.AddTensorF32(bn, []int64{r, nOut}, bv)
		targets[arch.modules[weight][strings.LastIndexByte(arch.modules[weight], '.')+1:]] = true
		sum.Tensors += 2
		sum.Rank = max(sum.Rank, int(r))
	}
	if sum.Tensors == 0 {
		return sum, fmt.Errorf("%s: no LoRA tensors", wPath)
	}
	for t := range targets {
		sum.Targets = append(sum.Targets, t)
	}
	sort.Strings(sum.Targets)
	sum.Alpha = alpha
	sum.Rank = cfg.R
	return sum, w.WriteFile(out)
}

func checkPEFTConfig(cfg PEFTConfig) error {
	switch {
	case cfg.PeftType != "LORA":
		return fmt.Errorf("peft_type %q: only LORA converts", cfg.PeftType)
	case cfg.R < 1:
		return fmt.Errorf("r = %d: want a positive rank", cfg.R)
	case cfg.LoraAlpha <= 0:
		return fmt.Errorf("lora_alpha = %g: want a positive value", cfg.LoraAlpha)
	case cfg.UseDoRA:
		return errors.New("use_dora: DoRA's magnitude vectors have no place in llama.cpp's LoRA format")
	case cfg.FanInFanOut:
		return errors.New("fan_in_fan_out: Conv1D (GPT-2 style) weights are not among the architectures that convert")
	case cfg.Bias != "" && cfg.Bias != "none":
		return fmt.Errorf("bias = %q: llama.cpp's LoRA format holds no bias", cfg.Bias)
	case len(cfg.ModulesToSave) > 0:
		return fmt.Errorf("modules_to_save %v: whole trained modules have no place in a LoRA adapter", cfg.ModulesToSave)
	}
	for k, a := range cfg.AlphaPattern {
		if a != cfg.LoraAlpha {
			return fmt.Errorf("alpha_pattern %s = %g: llama.cpp's LoRA format has one alpha (%g)", k, a, cfg.LoraAlpha)
		}
	}
	return nil
}

var (
	ggufLoRAName = regexp.MustCompile(`^blk\.(\d+)\.([a-z_]+)\.weight\.lora_(a|b)$`)
	peftName     = regexp.MustCompile(`^(?:base_model\.model\.)?model\.layers\.(\d+)\.([a-z_]+\.[a-z_]+)\.lora_(A|B)(?:\.default)?\.weight$`)
)

func parseGGUFLoRAName(name string) (layer int, weight string, isA bool, err error) {
	m := ggufLoRAName.FindStringSubmatch(name)
	if m == nil {
		return 0, "", false, fmt.Errorf("tensor %q: want blk.N.<weight>.weight.lora_a or .lora_b", name)
	}
	if layer, err = strconv.Atoi(m[1]); err != nil {
		return 0, "", false, fmt.Errorf("tensor %q: layer number: %w", name, err)
	}
	return layer, m[2], m[3] == "a", nil
}

func parsePEFTName(name string, arch peftArch) (layer int, weight string, isA bool, err error) {
	m := peftName.FindStringSubmatch(name)
	if m == nil {
		return 0, "", false, fmt.Errorf("tensor %q: want base_model.model.model.layers.N.<module>.lora_A.weight or lora_B "+
			"(embeddings, lm_head and norms are not converted)", name)
	}
	if layer, err = strconv.Atoi(m[1]); err != nil {
		return 0, "", false, fmt.Errorf("tensor %q: layer number: %w", name, err)
	}
	for g, hf := range arch.modules {
		if hf == m[2] {
			return layer, g, m[3] == "A", nil
		}
	}
	return 0, "", false, fmt.Errorf("tensor %q: module %s is not one llama.cpp's LoRA can adapt (%v)", name, m[2], slices.Sorted(maps.Values(arch.modules)))
}

// orderedWeights sorts weight names as CreateLoRA writes them: by layer,
// then in Targets order.
func orderedWeights[T any](pairs map[string]T, layers int) []string {
	names := make([]string, 0, len(pairs))
	for n := range pairs {
		names = append(names, n)
	}
	key := func(n string) (int, int) {
		l, w, _, err := parseGGUFLoRAName(n + ".lora_a")
		if err != nil { // every caller's names come from parsed tensor names
			panic(fmt.Sprintf("train: orderedWeights of %q: %v", n, err))
		}
		return l, slices.Index(Targets, w)
	}
	sort.Slice(names, func(i, j int) bool {
		li, ti := key(names[i])
		lj, tj := key(names[j])
		return li < lj || li == lj && ti < tj
	})
	return names
}

// permuteRows reorders the rows of a row-major [rows, cols] matrix as
// llama.cpp's converter does for q and k (LlamaModel.permute): within each
// of heads heads, row h*d + j*d/2 + i (Hugging Face: two halves) moves to
// h*d + 2i + j (GGUF: interleaved pairs), d = rows/heads.
func permuteRows(v []float32, rows, cols, heads int) ([]float32, error) {
	return reorderRows(v, rows, cols, heads, false)
}

// unpermuteRows is permuteRows' inverse.
func unpermuteRows(v []float32, rows, cols, heads int) ([]float32, error) {
	return reorderRows(v, rows, cols, heads, true)
}

func reorderRows(v []float32, rows, cols, heads int, inverse bool) ([]float32, error) {
	if heads < 1 || rows%heads != 0 || (rows/heads)%2 != 0 || len(v) != rows*cols {
		return nil, fmt.Errorf("cannot reorder %d rows into %d heads of rotary pairs", rows, heads)
	}
	d := rows / heads
	out := make([]float32, len(v))
	for h := range heads {
		for j := range 2 {
			for i := range d / 2 {
				hf, gg := h*d+j*d/2+i, h*d+2*i+j
				src, dst := hf, gg
				if inverse {
					src, dst = gg, hf
				}
				copy(out[dst*cols:(dst+1)*cols], v[src*cols:(src+1)*cols])
			}
		}
	}
	return out, nil
}

// BaseModelName is the Hugging Face model the GGUF was converted from, as
// its metadata says (AutoPeftModelForCausalLM.from_pretrained loads it):
// general.source.huggingface.repository, a huggingface.co source URL, or
// organization/basename-size_label-finetune as convert_hf_to_gguf.py
// splits a repository name; else general.name, else the file's name.
func BaseModelName(m *llama.Model) string {
	if r := m.Meta("general.source.huggingface.repository"); r != "" {
		return r
	}
	if u := m.Meta("general.source.url"); strings.HasPrefix(u, "https://huggingface.co/") {
		return strings.Trim(strings.TrimPrefix(u, "https://huggingface.co/"), "/")
	}
	if b := m.Meta("general.basename"); b != "" {
		name := b
		for _, k := range []string{"general.size_label", "general.finetune"} {
			if v := m.Meta(k); v != "" {
				name += "-" + v
			}
		}
		if o := m.Meta("general.organization"); o != "" {
			name = o + "/" + name
		}
		return name
	}
	if n := m.Meta("general.name"); n != "" {
		return n
	}
	return filepath.Base(m.Path())
}
