package dataset

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestResumeRollouts: a new file gets its provenance; a file made with
// other settings is refused, naming each difference; a group cut short is
// dropped and the complete ones are kept.
func TestResumeRollouts(t *testing.T) {
	out := filepath.Join(t.TempDir(), "r.jsonl")
	prov := RolloutProvenance{Schema: SchemaRolloutProvenance, ModelSHA256: "aaaa", Settings: RolloutSettings{Group: 2, Temperature: 1, Stop: []string{}}}
	if done, err := ResumeRollouts(out, 2, prov); err != nil || len(done) != 0 {
		t.Fatalf("a new file: %v, %v", done, err)
	}
	if _, err := os.Stat(ProvenancePath(out)); err != nil {
		t.Fatalf("no provenance written: %v", err)
	}
	w, err := Create(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []Rollout{{PromptID: "a", Sample: 0}, {PromptID: "a", Sample: 1}, {PromptID: "b", Sample: 0}} {
		if err := w.Write(&r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	other := prov
	other.Settings.Temperature = 0.7
	other.ModelSHA256 = "bbbb"
	_, err = ResumeRollouts(out, 2, other)
	if err == nil || !strings.Contains(err.Error(), "temperature: 1 in the file, 0.7 now") || !strings.Contains(err.Error(), "model sha256 aaaa") {
		t.Fatalf("other settings: %v", err)
	}
	done, err := ResumeRollouts(out, 2, prov)
	if err != nil || len(done) != 1 || !done["a"] {
		t.Fatalf("resume: done %v, %v; want only a", done, err)
	}
	recs, _, _, err := ReadFile[Rollout](out, false)
	if err != nil || len(recs) != 2 {
		t.Fatalf("after resume: %d records, %v; want a's 2", len(recs), err)
	}
	if s := prov.String(); !strings.Contains(s, "group 2") || !strings.Contains(s, "no adapter") {
		t.Errorf("String: %s", s)
	}
}
