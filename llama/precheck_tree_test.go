package llama

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestRopeEqualsHeadMatchesTree reads ropeEqualsHead off the llama.cpp tree
// this package is built from, so the table cannot drift from the code it
// stands for (a new tree, a model file changed): an architecture belongs in
// it when every graph builder llama_model::build_graph makes for it asserts
// GGML_ASSERT(n_embd_head == hparams.n_rot) in its constructor, the line not
// commented out. It found the table wrong on the pin itself: granitemoe and
// minicpm use the granite builder, which asserts (the pre-check let through
// files on which llama.cpp aborts), while nemotron and minimax-m2 have the
// assertion commented out (the pre-check refused files llama.cpp loads).
func TestRopeEqualsHeadMatchesTree(t *testing.T) {
	src := filepath.Join("..", "third_party", "llama.cpp", "llama", "src")
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

	// The constructors that assert.
	asserting := map[string]bool{}
	ctor := regexp.MustCompile(`(?m)^(?:template\s*<[^>]*>\s*)?(llm_build_\w+)(?:<\w+>)?::llm_build_\w+\(`)
	assertLine := regexp.MustCompile(`GGML_ASSERT\(\s*n_embd_head\s*==\s*hparams\.n_rot\s*\)`)
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

	// build_graph's switch: each group of case labels and the builders it
	// makes.
	model := read("llama-model.cpp")
	i := strings.Index(model, "llama_model::build_graph(")
	if i < 0 {
		t.Fatal("llama-model.cpp has no llama_model::build_graph")
	}
	body := model[i:]
	if j := strings.Index(body, `GGML_ABORT("fatal error")`); j > 0 {
		body = body[:j]
	}
	caseLine := regexp.MustCompile(`^\s*case (LLM_ARCH_\w+):`)
	builder := regexp.MustCompile(`make_unique<\s*(llm_build_\w+)`)
	var want []string
	var archs, builders []string
	flush := func() {
		if len(builders) > 0 && !slices.ContainsFunc(builders, func(b string) bool { return !asserting[b] }) {
			for _, a := range archs {
				if names[a] == "" {
					t.Fatalf("%s has no name in llama-arch.cpp", a)
				}
				want = append(want, names[a])
			}
		}
		archs, builders = nil, nil
	}
	for _, line := range strings.Split(body, "\n") {
		if m := caseLine.FindStringSubmatch(line); m != nil {
			if len(builders) > 0 {
				flush()
			}
			archs = append(archs, m[1])
			continue
		}
		for _, m := range builder.FindAllStringSubmatch(line, -1) {
			builders = append(builders, m[1])
		}
	}
	flush()
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
