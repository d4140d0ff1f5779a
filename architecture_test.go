package confclip

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/confclip/confclip/"

// TestArchitectureDoc checks docs/architecture.md's package table against
// `go list`: every package of the module has its row (but the module's root,
// internal/, examples/ and deploy/, which the page names in prose), every
// row names a package that exists, and each row's imports are exactly the
// module packages the package imports (internal/ helpers aside, which the
// page lists under the picture), so an import added, dropped or reversed
// shows up here. Names that are not module packages (parquet-go) must be
// among the package's imports too.
func TestArchitectureDoc(t *testing.T) {
	imports := moduleImports(t)
	rows := architectureRows(t)
	for name := range imports {
		skip := strings.HasPrefix(name, "internal/") || strings.HasPrefix(name, "examples/") || name == "deploy"
		if _, ok := rows[name]; !ok && !skip {
			t.Errorf("docs/architecture.md: no row for package %s", name)
		}
	}
	for name, doc := range rows {
		all, ok := imports[name]
		if !ok {
			t.Errorf("docs/architecture.md: a row for %s, which is not a package of the module", name)
			continue
		}
		if doc == nil { // "the packages above": the command wires everything
			continue
		}
		var real []string
		for _, imp := range all {
			if p, ok := strings.CutPrefix(imp, module); ok && !strings.HasPrefix(p, "internal/") {
				real = append(real, p)
			}
		}
		var documented []string
		for _, d := range doc {
			switch {
			case strings.HasPrefix(d, "internal/"):
			case isPackage(imports, d):
				documented = append(documented, d)
			case !slices.ContainsFunc(all, func(imp string) bool { return strings.Contains(imp, d) }):
				t.Errorf("docs/architecture.md: %s imports %s, says the row; it does not", name, d)
			}
		}
		slices.Sort(real)
		slices.Sort(documented)
		for _, d := range documented {
			if !slices.Contains(real, d) {
				t.Errorf("docs/architecture.md: %s imports %s, says the row; go list says it does not", name, d)
			}
		}
		for _, r := range real {
			if !slices.Contains(documented, r) {
				t.Errorf("docs/architecture.md: %s imports %s; the row does not say so", name, r)
			}
		}
	}
	if len(rows) < 10 {
		t.Fatalf("read %d rows of docs/architecture.md's package table; the parser lost it", len(rows))
	}
}

// architectureRows reads the package table: each row's package (`name/`)
// and the names its imports column lists, each the first word of an item
// (items are split at commas outside parentheses); nil for the command's
// "the packages above".
func architectureRows(t *testing.T) map[string][]string {
	f, err := os.Open("docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows := map[string][]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		cells := strings.Split(sc.Text(), " | ")
		if len(cells) != 3 || !strings.HasPrefix(cells[0], "| `") {
			continue
		}
		name := strings.TrimSuffix(strings.Trim(strings.TrimPrefix(cells[0], "| "), "`"), "/")
		col := strings.TrimSuffix(cells[2], " |")
		if col == "the packages above" {
			rows[name] = nil
			continue
		}
		list := []string{}
		for _, item := range splitOutside(col) {
			word, _, _ := strings.Cut(strings.TrimSpace(item), " ")
			if word = strings.Trim(word, "`"); word != "" && word != "—" {
				list = append(list, word)
			}
		}
		rows[name] = list
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return rows
}

// moduleImports is `go list`'s view of the module: each package (by its
// path in the module) and everything it imports, tests aside.
func moduleImports(t *testing.T) map[string][]string {
	t.Helper()
	out, err := exec.Command("go", "list", "-json", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	imports := map[string][]string{} // module package -> everything it imports
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		if name, ok := strings.CutPrefix(p.ImportPath, module); ok {
			imports[name] = p.Imports
		}
	}
	return imports
}

// TestNoFolderImportsUpward: with every package counted as its top folder
// (llama/precheck as llama, testkit/testutil as testkit), the folders'
// imports form no cycle, so none runs upward: the helpers of internal/
// import nothing of the module, and a folder's subpackage stands where its
// folder does (shard/merge on pipeline, which imports shard, was one).
// Tests may import upward (an external test of llama uses modelgen).
func TestNoFolderImportsUpward(t *testing.T) {
	top := func(p string) string { f, _, _ := strings.Cut(p, "/"); return f }
	edges := map[string]map[string][]string{} // folder -> folder -> the imports that make the arrow
	for name, all := range moduleImports(t) {
		for _, imp := range all {
			p, ok := strings.CutPrefix(imp, module)
			if !ok || top(p) == top(name) {
				continue
			}
			if edges[top(name)] == nil {
				edges[top(name)] = map[string][]string{}
			}
			edges[top(name)][top(p)] = append(edges[top(name)][top(p)], name+" → "+p)
		}
	}
	// A depth-first search; a grey folder met again closes a cycle.
	state := map[string]int{} // 0 unseen, 1 on the path, 2 done
	var path []string
	var visit func(f string)
	visit = func(f string) {
		state[f] = 1
		path = append(path, f)
		for g := range edges[f] {
			switch state[g] {
			case 0:
				visit(g)
			case 1:
				i := slices.Index(path, g)
				var why []string
				for j := i; j < len(path); j++ {
					next := g
					if j+1 < len(path) {
						next = path[j+1]
					}
					why = append(why, edges[path[j]][next]...)
				}
				slices.Sort(why)
				t.Errorf("folders import in a cycle %s → %s: %s", strings.Join(path[i:], " → "), g, strings.Join(why, "; "))
			}
		}
		path = path[:len(path)-1]
		state[f] = 2
	}
	folders := make([]string, 0, len(edges))
	for f := range edges {
		folders = append(folders, f)
	}
	slices.Sort(folders)
	for _, f := range folders {
		if state[f] == 0 {
			visit(f)
		}
	}
	if len(edges["internal"]) != 0 {
		t.Errorf("internal/ imports %v: its helpers import nothing of the module", edges["internal"])
	}
}

func isPackage(imports map[string][]string, name string) bool {
	_, ok := imports[name]
	return ok
}

// splitOutside splits s at the commas that are not inside parentheses.
func splitOutside(s string) []string {
	var out []string
	depth, start := 0, 0
	for i, r := range s {
		switch r {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}
