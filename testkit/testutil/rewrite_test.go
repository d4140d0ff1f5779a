package testutil

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRewriteMarked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "doc.md")
	doc := "# Doc\n\n<!-- t -->\nold\n<!-- end t -->\n\nafter\n"
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := RewriteMarked(path, "t", "new\ntable\n"); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := "# Doc\n\n<!-- t -->\nnew\ntable\n<!-- end t -->\n\nafter\n"; string(got) != want {
		t.Errorf("got %q, want %q", got, want)
	}
	// a name without its markers, or markers out of order, change nothing
	for _, bad := range []string{"u", "end t"} {
		if err := RewriteMarked(path, bad, "x\n"); err == nil || !strings.Contains(err.Error(), "markers") {
			t.Errorf("RewriteMarked(%q): err %v, want one naming the markers", bad, err)
		}
	}
	if again, _ := os.ReadFile(path); string(again) != string(got) {
		t.Errorf("a refused rewrite changed the file: %q", again)
	}
}
