package verifiers

import (
	"bufio"
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
)

// policyDoc is the documentation whose equivalence policy table is tested.
const policyDoc = "../docs/verifiers.md"

// policyRow is one row of the table: answers that must and must not match
// the reference.
type policyRow struct {
	line          int
	kind          string
	reference     string
	passes, fails []string
}

var codeSpanRE = regexp.MustCompile("`([^`]+)`")

// readPolicyTable parses the table under "### Equivalence policy" in
// docs/verifiers.md, by the header names of its columns.
func readPolicyTable(t *testing.T) []policyRow {
	t.Helper()
	f, err := os.Open(policyDoc)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []policyRow
	col := map[string]int{}
	inSection, inTable := false, false
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(text, "#"):
			if inSection && inTable {
				return rows
			}
			inSection = text == "### Equivalence policy"
			continue
		case !inSection:
			continue
		case !strings.HasPrefix(text, "|"):
			if inTable {
				return rows
			}
			continue
		}
		cells := strings.Split(strings.Trim(text, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if !inTable { // the header
			inTable = true
			for i, c := range cells {
				col[c] = i
			}
			for _, name := range []string{"answer", "reference", "passes", "fails"} {
				if _, ok := col[name]; !ok {
					t.Fatalf("%s:%d: the policy table has no column %q", policyDoc, line, name)
				}
			}
			continue
		}
		if strings.HasPrefix(cells[0], "---") {
			continue
		}
		if len(cells) != len(col) {
			t.Fatalf("%s:%d: %d cells, want %d (a | inside a cell?)", policyDoc, line, len(cells), len(col))
		}
		spans := func(cell string) []string {
			var out []string
			for _, m := range codeSpanRE.FindAllStringSubmatch(cell, -1) {
				out = append(out, m[1])
			}
			return out
		}
		row := policyRow{line: line, kind: cells[col["answer"]], passes: spans(cells[col["passes"]]), fails: spans(cells[col["fails"]])}
		ref := spans(cells[col["reference"]])
		if len(ref) != 1 || len(row.passes) == 0 || len(row.fails) == 0 {
			t.Fatalf("%s:%d (%s): want one reference and at least one passing and one failing answer, got %q, %q, %q",
				policyDoc, line, row.kind, ref, row.passes, row.fails)
		}
		row.reference = ref[0]
		rows = append(rows, row)
	}
	return rows
}

// TestMathPolicyTable checks every example of the equivalence policy table
// in docs/verifiers.md against the math verifier.
func TestMathPolicyTable(t *testing.T) {
	rows := readPolicyTable(t)
	if len(rows) < 20 {
		t.Fatalf("%s: the equivalence policy table has %d rows, want at least 20", policyDoc, len(rows))
	}
	v := newMathForTest(t)
	examples := 0
	for _, r := range rows {
		for _, want := range []bool{true, false} {
			answers := r.passes
			if !want {
				answers = r.fails
			}
			for _, a := range answers {
				examples++
				res, err := v.Verify(context.Background(), `\boxed{`+a+`}`, r.reference)
				if err != nil {
					t.Errorf("%s:%d (%s): %q against %q: %v", policyDoc, r.line, r.kind, a, r.reference, err)
					continue
				}
				if res.Correct != want {
					t.Errorf("%s:%d (%s): %q against the reference %q: correct=%v, the table says %v (%s)",
						policyDoc, r.line, r.kind, a, r.reference, res.Correct, want, res.Reason)
				}
			}
		}
	}
	t.Logf("%d rows, %d examples", len(rows), examples)
}
