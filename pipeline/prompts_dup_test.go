package pipeline

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/confclip/confclip/dataset"
)

// TestReadPromptsDuplicateIDs: two prompts with one id are refused when the
// run starts, naming the file, the id and both lines.
func TestReadPromptsDuplicateIDs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "train.jsonl")
	w, err := dataset.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b", "c", "b"} {
		w.Write(dataset.Prompt{ID: id, Prompt: "Q " + id})
	}
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	_, err = readPrompts(path, "")
	if err == nil {
		t.Fatal("duplicate ids accepted")
	}
	for _, want := range []string{path, `"b"`, "line 2", "line 4"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}
