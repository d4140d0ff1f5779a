package dataset

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPromptInvalidUTF8Marked: JSON decoding turns invalid UTF-8 into
// U+FFFD without a word; both prompt readers now mark such a prompt so
// that rollout reports it as bad (docs/rollout.md).
func TestPromptInvalidUTF8Marked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.jsonl")
	body := `{"id":"good","prompt":"2+2=","answer":"4"}` + "\n" +
		`{"id":"bad","prompt":"2+` + "\xff" + `2=","answer":"4"}` + "\n"
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	ps, _, _, err := ReadFile[Prompt](path, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 2 || ps[0].BadText != "" || !strings.Contains(ps[1].BadText, "not valid UTF-8 (byte 0xff") {
		t.Fatalf("ReadFile: %+v", ps)
	}
	pf, err := ReadPrompts(path, FieldMap{}, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(pf.Prompts) != 2 || pf.Prompts[0].BadText != "" || !strings.Contains(pf.Prompts[1].BadText, "not valid UTF-8") {
		t.Fatalf("ReadPrompts: %+v", pf.Prompts)
	}
}
