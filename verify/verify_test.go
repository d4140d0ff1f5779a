package verify

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/confclip/confclip/pipeline"
	"github.com/confclip/confclip/shard"
)

func TestFile(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "cases.jsonl")
	os.WriteFile(in, []byte(`{"answer":"1/2","completion":"so \\boxed{0.5}"}
{"answer":"3","completion":"it is 4"}
`), 0o644)
	var buf bytes.Buffer
	vc := pipeline.DefaultConfig().Verifier
	sum, err := File(context.Background(), FileOptions{Verifier: vc, In: in, W: &buf, Jobs: 2})
	if err != nil || sum.Records != 2 || sum.Correct != 1 || strings.Count(buf.String(), "\n") != 2 {
		t.Fatalf("%+v %v\n%s", sum, err, buf.String())
	}
	os.WriteFile(in, []byte("{\"answer\":\"1\",\"completion\":\"1\"}\n{\"answer\":\"1\"}\n"), 0o644)
	out := filepath.Join(dir, "out.jsonl")
	if _, err := File(context.Background(), FileOptions{Verifier: vc, In: in, Out: out}); err == nil || !strings.Contains(err.Error(), "cases.jsonl:2") {
		t.Fatalf("a line without completion: %v", err)
	}
	if _, err := os.Stat(out); err == nil {
		t.Fatal("a failed verification left its output file")
	}
}

// TestOne: one completion, with the answer span of what was extracted.
func TestOne(t *testing.T) {
	vc := pipeline.DefaultConfig().Verifier
	r, err := One(context.Background(), vc, `so \boxed{0.5}`, "1/2")
	if err != nil || !r.Correct || r.Extracted == "" || len(r.AnswerSpan) != 2 {
		t.Fatalf("%+v %v", r, err)
	}
	if r, err := One(context.Background(), vc, "it is 4", "3"); err != nil || r.Correct {
		t.Fatalf("a wrong answer: %+v %v", r, err)
	}
}

// TestShardedFile: a sharded run verifies only its shard's lines, and each
// result names the input line it answers.
func TestShardedFile(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "cases.jsonl")
	var b strings.Builder
	for i := range 20 {
		b.WriteString(`{"prompt_id":"p` + string(rune('a'+i)) + `","answer":"1","completion":"1"}` + "\n")
	}
	os.WriteFile(in, []byte(b.String()), 0o644)
	total := 0
	for k := range 2 {
		var buf bytes.Buffer
		sum, err := File(context.Background(), FileOptions{Verifier: pipeline.DefaultConfig().Verifier, In: in, W: &buf, Shard: shard.Shard{K: k, N: 2}})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(buf.String(), `"line":`) && sum.Records > 0 {
			t.Errorf("shard %d: results without their line: %s", k, buf.String())
		}
		total += sum.Records
	}
	if total != 20 {
		t.Errorf("the two shards verified %d lines, want 20", total)
	}
}

// TestOutputIsNotInput (issue 23): an output naming the input is refused
// before anything is read or written, and the input is left as it was.
func TestOutputIsNotInput(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "S.jsonl")
	const content = `{"prompt_id":"p","text":"x"}` + "\n"
	os.WriteFile(data, []byte(content), 0o644)
	_, err := File(context.Background(), FileOptions{In: data, Out: data})
	if err == nil || !strings.Contains(err.Error(), "the output is the input") {
		t.Errorf("verify --out IN: got %v, want the output refused", err)
	}
	if b, _ := os.ReadFile(data); string(b) != content {
		t.Fatalf("the input now holds %q", b)
	}
}

// TestNumbersChecked (issue 23): jobs and the verifier's settings are
// checked before anything is written, each error naming its key.
func TestNumbersChecked(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "d.jsonl")
	os.WriteFile(data, []byte("{}\n"), 0o644)
	out := filepath.Join(dir, "out")
	base := pipeline.DefaultConfig().Verifier
	timeout := base
	timeout.TimeoutMS = -1000
	for _, c := range []struct {
		name, want string
		o          FileOptions
	}{
		{"verify --jobs 100000000", "jobs = 100000000", FileOptions{Verifier: base, In: data, Out: out, Jobs: 100000000}},
		{"verify --timeout -1s", "verifier.timeout_ms", FileOptions{Verifier: timeout, In: data, Out: out}},
	} {
		if _, err := File(context.Background(), c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error naming %s", c.name, err, c.want)
		}
		if _, err := os.Stat(out); err == nil {
			t.Fatalf("%s: wrote %s", c.name, out)
		}
	}
}
