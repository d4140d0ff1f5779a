package jsonnull

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
)

type row struct {
	Name  string             `json:"name"`
	Acc   float64            `json:"acc"`
	P     float32            `json:"p,omitempty"`
	Ptr   *float64           `json:"ptr"`
	Vals  []float64          `json:"vals"`
	ByArm map[string]float64 `json:"by_arm"`
	Any   any                `json:"any"`
	When  time.Time          `json:"when"`
	Inner struct {
		X float64 `json:"x"`
	} `json:"inner"`
	hidden float64
}

// TestNonFiniteAreNull: NaN and ±Inf anywhere in a value (field, pointer,
// slice, map, interface, nested struct, float32) become null; the rest is
// what encoding/json writes; the value itself is not changed.
func TestNonFiniteAreNull(t *testing.T) {
	nan := math.NaN()
	r := row{Name: "a", Acc: nan, P: float32(math.Inf(1)), Ptr: &nan, Vals: []float64{1, math.Inf(-1)},
		ByArm: map[string]float64{"x": nan, "y": 0.5}, Any: nan, When: time.Unix(0, 0).UTC(), hidden: nan}
	r.Inner.X = nan
	if _, err := json.Marshal(r); err == nil {
		t.Fatal("encoding/json accepts NaN: the test shows nothing")
	}
	b, err := MarshalIndent([]row{r}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	var back []map[string]any
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("%v in %s", err, b)
	}
	got := back[0]
	for _, k := range []string{"acc", "p", "ptr", "any"} {
		if got[k] != nil {
			t.Errorf("%s = %v, want null", k, got[k])
		}
	}
	if v := got["vals"].([]any); v[0] != 1.0 || v[1] != nil {
		t.Errorf("vals = %v", v)
	}
	if m := got["by_arm"].(map[string]any); m["x"] != nil || m["y"] != 0.5 {
		t.Errorf("by_arm = %v", m)
	}
	if got["inner"].(map[string]any)["x"] != nil || got["when"] != "1970-01-01T00:00:00Z" || got["name"] != "a" {
		t.Errorf("got %s", b)
	}
	if !math.IsNaN(r.Acc) || !math.IsNaN(*r.Ptr) || !math.IsNaN(r.ByArm["x"]) {
		t.Error("MarshalIndent changed its argument")
	}
	// Finite values: byte for byte encoding/json's output.
	fin := row{Name: "b", Acc: 0.25, Vals: []float64{1e300}}
	want, _ := json.Marshal(fin)
	if b, err := Marshal(fin); err != nil || string(b) != string(want) {
		t.Errorf("finite value: %s, %v; want %s", b, err, want)
	}
	// Other errors stay errors.
	if _, err := Marshal(map[string]any{"c": make(chan int)}); err == nil {
		t.Error("a channel marshalled")
	}
	// A value holding the sentinel with a NaN is refused, not mangled.
	if _, err := Marshal([]float64{math.Nextafter(-math.MaxFloat64, 0), nan}); err == nil || !strings.Contains(err.Error(), "sentinel") {
		t.Errorf("sentinel and NaN: %v", err)
	}
	// -MaxFloat64, the usual stand-in for -Inf, is kept beside a NaN.
	if b, err := Marshal([]any{-math.MaxFloat64, float32(-math.MaxFloat32), nan}); err != nil || string(b) != "[-1.7976931348623157e+308,-3.4028235e+38,null]" {
		t.Errorf("-MaxFloat64 and NaN: %s, %v", b, err)
	}
}
