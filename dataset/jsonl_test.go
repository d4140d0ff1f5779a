package dataset

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

type rec struct {
	ID string `json:"id"`
}

// TestSkipBadOverLongLine: with skipBad, a line over the limit is skipped
// (reported with its line number) and reading goes on; it used to loop
// forever (score) or grow until out of memory (rollout, logprobs).
func TestSkipBadOverLongLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "long.jsonl")
	var b bytes.Buffer
	b.WriteString(`{"id":"a"}` + "\n")
	b.WriteString(`{"id":"` + strings.Repeat("x", MaxLineBytes) + `"}` + "\n")
	b.WriteString(`{"id":"b"}` + "\n")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var recs []rec
	var lines []int
	var skipped []*LineError
	var err error
	go func() {
		recs, lines, skipped, err = ReadFile[rec](path, true)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("ReadFile with skipBad did not return on an over-long line")
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[1].ID != "b" || lines[1] != 3 {
		t.Fatalf("records %v at lines %v, want a and b at lines 1 and 3", recs, lines)
	}
	if len(skipped) != 1 || skipped[0].Line != 2 || !strings.Contains(skipped[0].Error(), "longer than") {
		t.Fatalf("skipped %v, want line 2 as too long", skipped)
	}
	// Without skipBad the same line is an error naming it.
	if _, _, _, err := ReadFile[rec](path, false); err == nil || !strings.Contains(err.Error(), "long.jsonl:2:") {
		t.Fatalf("without skipBad: %v", err)
	}
}

// TestOverLongLineNotBuffered: the part of a line past the limit is read
// and dropped, not kept: memory stays near the limit whatever the line's
// length, and a last line without a newline is handled the same way.
func TestOverLongLineNotBuffered(t *testing.T) {
	defer func(n int) { maxLine = n }(maxLine)
	maxLine = 1 << 10
	long := strings.Repeat("y", 8<<20)
	in := `{"id":"a"}` + "\n" + long + "\n" + `{"id":"b"}` + "\n" + long
	var st0, st1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&st0)
	r := NewReader(strings.NewReader(in), "mem.jsonl")
	var got []string
	var bad []int
	for {
		var v rec
		err := r.Next(&v)
		var le *LineError
		if errors.As(err, &le) {
			bad = append(bad, le.Line)
			continue
		}
		if err != nil {
			break
		}
		got = append(got, v.ID)
	}
	runtime.ReadMemStats(&st1)
	if strings.Join(got, ",") != "a,b" || len(bad) != 2 || bad[0] != 2 || bad[1] != 4 {
		t.Fatalf("records %v, bad lines %v; want a,b and lines 2 and 4", got, bad)
	}
	if grown := st1.TotalAlloc - st0.TotalAlloc; grown > 1<<20 {
		t.Fatalf("reading two 8 MiB lines with a 1 KiB limit allocated %d bytes", grown)
	}
}

// TestWriterKeepsText: records are written as their text reads, without
// HTML escaping (`<|im_start|>` stays, not \u003c|im_start|\u003e).
func TestWriterKeepsText(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.jsonl")
	w, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(Prompt{ID: "a", Prompt: "<|im_start|>user a & b", Answer: "x > 1"})
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if !strings.Contains(string(b), `"<|im_start|>user a & b"`) || !strings.Contains(string(b), `"x > 1"`) || strings.Count(string(b), "\n") != 1 {
		t.Errorf("written: %s", b)
	}
}
