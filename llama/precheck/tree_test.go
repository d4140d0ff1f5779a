package precheck

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestRopeEqualsHeadMatchesTree reads ropeEqualsHead off the llama.cpp tree
// this package is built from, so the table cannot drift from the code it
// stands for (a new tree, a model file changed): an architecture belongs in
// it when the graph its model class builds asserts
// GGML_ASSERT(n_embd_head == n_rot) in its constructor, the line not
// commented out. The tree maps an architecture to a model class
// (llama-model.cpp's llama_model_mapping: case LLM_ARCH_X: new
// llama_model_x), and a class to its graph (models/models.h: a struct graph
// of its own, `using graph = llama_model_y::graph`, or its parent's). On the
// tree before 0c1e57098 it found the table wrong: granitemoe and minicpm
// use granite's graph, which asserts, and nemotron's and minimax-m2's
// assertions were commented out.
func TestRopeEqualsHeadMatchesTree(t *testing.T) {
	src := filepath.Join("..", "..", "third_party", "llama.cpp", "llama", "src")
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			t.Fatalf("the llama.cpp tree (make lays it down): %v", err)
		}
		return string(b)
	}
	names := map[string]string{} // LLM_ARCH_LLAMA -> "llama"
	for _, m := range regexp.MustCompile(`\{\s*(LLM_ARCH_\w+)\s*,\s*"([^"]+)"\s*\}`).FindAllStringSubmatch(read("llama-arch.cpp"), -1) {
		names[m[1]] = m[2]
	}

	// The graph constructors that assert: llama_model_x::graph[<..>]::graph(
	// up to the next constructor in the file.
	asserting := map[string]bool{}
	ctor := regexp.MustCompile(`(?m)^(?:template\s*<[^>]*>\s*)?(llama_model_\w+)::graph(?:<[^>]*>)?::graph\(`)
	assertLine := regexp.MustCompile(`GGML_ASSERT\(\s*n_embd_head\s*==\s*(?:hparams\.)?n_rot(?:\(\))?\s*\)`)
	files, err := filepath.Glob(filepath.Join(src, "models", "*.cpp"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no models/*.cpp under %s (%v)", src, err)
	}
	for _, f := range files {
		text := read(filepath.Join("models", filepath.Base(f)))
		locs := ctor.FindAllStringSubmatchIndex(text, -1)
		for i, loc := range locs {
			end := len(text)
			if i+1 < len(locs) {
				end = locs[i+1][0]
			}
			for _, line := range strings.Split(text[loc[0]:end], "\n") {
				if l := strings.TrimSpace(line); !strings.HasPrefix(l, "//") && assertLine.MatchString(l) {
					asserting[text[loc[2]:loc[3]]] = true
				}
			}
		}
	}

	// models.h: each model class's parent and where its graph comes from.
	parent, alias, own := map[string]string{}, map[string]string{}, map[string]bool{}
	structLine := regexp.MustCompile(`^struct (llama_model_\w+)\s*:\s*public\s+(\w+)`)
	aliasLine := regexp.MustCompile(`^\s*using graph = (llama_model_\w+)(?:<[^>]*>)?::graph`)
	ownLine := regexp.MustCompile(`^\s*struct graph\b`)
	cur := ""
	for _, line := range strings.Split(read(filepath.Join("models", "models.h")), "\n") {
		if m := structLine.FindStringSubmatch(line); m != nil {
			cur, parent[m[1]] = m[1], m[2]
			continue
		}
		if cur == "" {
			continue
		}
		if m := aliasLine.FindStringSubmatch(line); m != nil {
			alias[cur] = m[1]
		} else if ownLine.MatchString(line) {
			own[cur] = true
		}
	}
	var graphOf func(c string, depth int) string
	graphOf = func(c string, depth int) string {
		switch {
		case depth > 8:
			return ""
		case own[c]:
			return c
		case alias[c] != "":
			return graphOf(alias[c], depth+1)
		case parent[c] != "":
			return graphOf(parent[c], depth+1)
		}
		return ""
	}

	// llama_model_mapping's switch: each group of case labels and the class.
	model := read("llama-model.cpp")
	i := strings.Index(model, "static llama_model * llama_model_mapping(")
	if i < 0 {
		t.Fatal("llama-model.cpp has no llama_model_mapping")
	}
	body := model[i:]
	if j := strings.Index(body, "\n}"); j > 0 {
		body = body[:j]
	}
	caseLine := regexp.MustCompile(`^\s*case (LLM_ARCH_\w+):`)
	newLine := regexp.MustCompile(`new (llama_model_\w+)\(`)
	var want, pending []string
	mapped := 0
	for _, line := range strings.Split(body, "\n") {
		if m := caseLine.FindStringSubmatch(line); m != nil {
			pending = append(pending, m[1])
			continue
		}
		if m := newLine.FindStringSubmatch(line); m != nil {
			for _, a := range pending {
				if names[a] == "" {
					t.Fatalf("%s has no name in llama-arch.cpp", a)
				}
				mapped++
				if asserting[graphOf(m[1], 0)] {
					want = append(want, names[a])
				}
			}
			pending = nil
		}
	}
	if mapped < 100 {
		t.Fatalf("mapped only %d architectures to model classes: the parse no longer fits the source", mapped)
	}
	if len(want) < 20 {
		t.Fatalf("read only %d asserting architectures off the tree (%v): the parse no longer fits the source", len(want), want)
	}
	var have []string
	for a := range ropeEqualsHead {
		have = append(have, a)
	}
	slices.Sort(want)
	slices.Sort(have)
	var missing, extra []string
	for _, a := range want {
		if !ropeEqualsHead[a] {
			missing = append(missing, a)
		}
	}
	for _, a := range have {
		if !slices.Contains(want, a) {
			extra = append(extra, a)
		}
	}
	if len(missing) > 0 || len(extra) > 0 {
		t.Fatalf("ropeEqualsHead: missing %v (their graphs assert n_embd_head == n_rot), not to be there %v (theirs do not)", missing, extra)
	}
	t.Logf("%d architectures assert n_embd_head == n_rot, as the table says", len(want))
}

// TestPrecheckLimitsMatchTree reads the pre-check's other numbers and names
// off the tree: llama-hparams.h's LLAMA_MAX_LAYERS and LLAMA_MAX_EXPERTS
// (0c1e57098 raised the experts from 512 to 1024 for Kimi K3), and
// llama-model.cpp's rope scaling types, which checkHparams names.
func TestPrecheckLimitsMatchTree(t *testing.T) {
	src := filepath.Join("..", "..", "third_party", "llama.cpp", "llama", "src")
	hp, err := os.ReadFile(filepath.Join(src, "llama-hparams.h"))
	if err != nil {
		t.Fatalf("the llama.cpp tree (make lays it down): %v", err)
	}
	for name, have := range map[string]int{"LLAMA_MAX_LAYERS": llamaMaxLayers, "LLAMA_MAX_EXPERTS": llamaMaxExperts} {
		m := regexp.MustCompile(`(?m)^#define ` + name + `\s+(\d+)`).FindSubmatch(hp)
		if m == nil {
			t.Fatalf("llama-hparams.h defines no %s", name)
		}
		if want, _ := strconv.Atoi(string(m[1])); want != have {
			t.Errorf("%s is %d in the tree, the pre-check has %d", name, want, have)
		}
	}
	model, err := os.ReadFile(filepath.Join(src, "llama-model.cpp"))
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, m := range regexp.MustCompile(`\{\s*LLAMA_ROPE_SCALING_TYPE_\w+\s*,\s*"(\w+)"\s*\}`).FindAllSubmatch(model, -1) {
		types = append(types, string(m[1]))
	}
	if want := []string{"none", "linear", "yarn", "longrope"}; !slices.Equal(types, want) {
		t.Errorf("the tree's rope scaling types are %v, checkHparams names %v", types, want)
	}
}
