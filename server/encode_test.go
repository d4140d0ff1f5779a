package server

import (
	"encoding/json"
	"math"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestResponsesWithNonFiniteFloats: a NaN in a response or a stream chunk
// is written as null; encoding/json refused the whole value and the dropped
// error sent an empty body or an empty event ("data: "). (A log-prob of
// -Inf is already -MaxFloat64 by tokenEntry, and stays so.)
func TestResponsesWithNonFiniteFloats(t *testing.T) {
	chunk := map[string]any{"object": "chat.completion.chunk", "choices": []chatChoice{{Index: 0,
		Logprobs: &chatLogprobs{Content: []tokenLogprob{tokenEntry("a", []byte("a"), math.Inf(-1), nil, false, 0), {Token: "b", Logprob: math.NaN()}}}}}}
	line := marshalLine(chunk)
	var back map[string]any
	if err := json.Unmarshal(line, &back); err != nil || back["object"] != "chat.completion.chunk" {
		t.Fatalf("chunk %q: %v", line, err)
	}
	if !strings.Contains(string(line), `"logprob":null`) || !strings.Contains(string(line), `"logprob":-1.7976931348623157e+308`) {
		t.Fatalf("the -Inf log-prob is not null: %s", line)
	}
	rec := httptest.NewRecorder()
	writeJSON(rec, map[string]any{"x": math.NaN()})
	if got := strings.TrimSpace(rec.Body.String()); got != `{"x":null}` {
		t.Fatalf("writeJSON of NaN: %q", got)
	}
	rec = httptest.NewRecorder()
	writeJSON(rec, map[string]any{"c": make(chan int)})
	if err := json.Unmarshal(rec.Body.Bytes(), &back); err != nil || back["error"] == nil {
		t.Fatalf("writeJSON of a value that cannot encode: %q", rec.Body.String())
	}
}
