package experiments

import (
	"bufio"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/confclip/confclip/internal/settings"
)

// The config reference, docs/config.md, has one table row per key:
//
//	| `table.key` | `default` | meaning |
//
// under a heading that names the table (## `[table]`). The default is a TOML
// value in backticks (`"math"`, `2048`, `1e-4`, `true`, `["a", "b"]`, `[]`).
// These tests keep that page, the example config and the code in step.
const (
	configDoc     = "../docs/config.md"
	exampleConfig = "../docs/example.toml"
)

// configKey is one leaf of File (a run's tables and [experiment]): its
// dotted TOML name and default value.
type configKey struct {
	name string
	def  reflect.Value
}

// configKeys walks File by reflection through its toml tags.
func configKeys() []configKey {
	var keys []configKey
	for _, k := range settings.Keys(DefaultFile()) {
		keys = append(keys, configKey{k.Name, k.Value})
	}
	return keys
}

// docRow is one key row of a documentation table.
type docRow struct {
	line         int
	heading, key string
	def, meaning string
}

var docRowRE = regexp.MustCompile("^\\|\\s*`([a-z0-9_]+(?:\\.[a-z0-9_]+)+)`\\s*\\|([^|]*)\\|(.*)\\|\\s*$")

// readDocRows reads the key rows of the markdown tables in path.
func readDocRows(t *testing.T, path string) []docRow {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []docRow
	heading := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			heading = line
		}
		if m := docRowRE.FindStringSubmatch(line); m != nil {
			rows = append(rows, docRow{line: n, heading: heading, key: m[1], def: strings.TrimSpace(m[2]), meaning: strings.TrimSpace(m[3])})
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return rows
}

// parseDefault reads a documented default as a value of type typ: a TOML
// value, optionally in backticks. With lenient set, a string that is not a
// quoted TOML string is taken as written.
func parseDefault(cell string, typ reflect.Type, lenient bool) (reflect.Value, error) {
	cell = strings.TrimSpace(cell)
	if typ.Kind() == reflect.Pointer && strings.HasPrefix(cell, "unset") {
		return reflect.Zero(typ), nil // a key whose default depends on the command
	}
	if len(cell) >= 2 && cell[0] == '`' && cell[len(cell)-1] == '`' {
		cell = cell[1 : len(cell)-1]
	}
	holder := reflect.New(reflect.StructOf([]reflect.StructField{{Name: "V", Type: typ, Tag: `toml:"v"`}}))
	if _, err := toml.Decode("v = "+cell, holder.Interface()); err != nil {
		if lenient && typ.Kind() == reflect.String {
			return reflect.ValueOf(cell), nil
		}
		return reflect.Value{}, err
	}
	return holder.Elem().Field(0), nil
}

// sameDefault compares a documented default with the code's; an empty list
// equals a nil one.
func sameDefault(doc, code reflect.Value) bool {
	if code.Kind() == reflect.Slice && doc.Len() == 0 && code.Len() == 0 {
		return true
	}
	return reflect.DeepEqual(doc.Interface(), code.Interface())
}

// tomlValue writes v as a TOML value, for the rows the test suggests.
func tomlValue(v reflect.Value) string {
	if v.Kind() == reflect.Slice && v.Len() == 0 {
		return "[]"
	}
	holder := reflect.New(reflect.StructOf([]reflect.StructField{{Name: "V", Type: v.Type(), Tag: `toml:"v"`}}))
	holder.Elem().Field(0).Set(v)
	b, err := toml.Marshal(holder.Interface())
	if err != nil {
		return fmt.Sprint(v.Interface())
	}
	return strings.TrimSpace(strings.TrimPrefix(string(b), "v = "))
}

// checkDocDefaults checks that every key row of path names a key of Config,
// under a heading naming its table when strict, with the default the code
// has. It returns the rows by key.
func checkDocDefaults(t *testing.T, path string, strict bool) map[string]docRow {
	t.Helper()
	defs := map[string]reflect.Value{}
	for _, k := range configKeys() {
		defs[k.name] = k.def
	}
	byKey := map[string]docRow{}
	for _, r := range readDocRows(t, path) {
		at := fmt.Sprintf("%s:%d", path, r.line)
		code, ok := defs[r.key]
		if !ok {
			t.Errorf("%s: `%s` is not a config key (renamed or removed from pipeline.Config or experiments.Config?)", at, r.key)
			continue
		}
		if prev, dup := byKey[r.key]; dup {
			t.Errorf("%s: `%s` is documented again (first at line %d)", at, r.key, prev.line)
		}
		byKey[r.key] = r
		table, _, _ := strings.Cut(r.key, ".")
		if strict && !strings.Contains(r.heading, "`["+table+"]`") {
			t.Errorf("%s: `%s` is under %q, want a heading naming `[%s]`", at, r.key, r.heading, table)
		}
		if strict && r.meaning == "" {
			t.Errorf("%s: `%s` has no meaning", at, r.key)
		}
		doc, err := parseDefault(r.def, code.Type(), !strict)
		switch {
		case err != nil:
			t.Errorf("%s: `%s`: default %s is not a TOML %s: %v", at, r.key, r.def, code.Type(), err)
		case !sameDefault(doc, code):
			t.Errorf("%s: `%s`: documented default %s, DefaultFile has `%s`", at, r.key, r.def, tomlValue(code))
		}
	}
	return byKey
}

// TestConfigDoc checks docs/config.md against File and DefaultFile:
// every key documented once, in its table's section, with the right default,
// and no key that no longer exists.
func TestConfigDoc(t *testing.T) {
	byKey := checkDocDefaults(t, configDoc, true)
	for _, k := range configKeys() {
		if _, ok := byKey[k.name]; !ok {
			t.Errorf("%s: `%s` is not documented; add a row under ## `[%s]`:\n| `%s` | `%s` | ... |",
				configDoc, k.name, strings.Split(k.name, ".")[0], k.name, tomlValue(k.def))
		}
	}
}

// TestMethodDocKnobs checks the knob table of docs/method.md the same way,
// without asking it to be complete.
func TestMethodDocKnobs(t *testing.T) {
	if len(checkDocDefaults(t, "../docs/method.md", false)) == 0 {
		t.Fatal("docs/method.md: no knob rows found")
	}
}

// TestExampleConfig loads docs/example.toml and checks that it sets every key.
func TestExampleConfig(t *testing.T) {
	if _, err := LoadFile(exampleConfig); err != nil {
		t.Fatal(err)
	}
	var cfg File
	md, err := toml.DecodeFile(exampleConfig, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range configKeys() {
		if !md.IsDefined(strings.Split(k.name, ".")...) {
			t.Errorf("%s: `%s` is not set; the example should show every key", exampleConfig, k.name)
		}
	}
}

// TestCheckedValuesDoc: docs/config.md's table of checked values is
// the file's table of checks (CheckedValues: pipeline's rows, then
// [experiment]'s), between its two markers.
func TestCheckedValuesDoc(t *testing.T) {
	b, err := os.ReadFile(configDoc)
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- checked values: from experiments.CheckedValues -->\n", "<!-- end of checked values -->"
	_, rest, ok := strings.Cut(string(b), begin)
	got, _, ok2 := strings.Cut(rest, end)
	want := CheckedValues()
	if !ok || !ok2 || got != want {
		t.Errorf("%s: the table of checked values between %q and %q is not Validate's; it should read:\n%s", configDoc, strings.TrimSpace(begin), end, want)
	}
	// Every key the table checks is a key of File (or a table's name).
	known := map[string]bool{"verifier": true}
	for _, k := range configKeys() {
		known[k.name] = true
	}
	for _, ck := range fileChecks() {
		if !known[ck.Key] {
			t.Errorf("Validate checks %q, which is no key of File", ck.Key)
		}
	}
}
