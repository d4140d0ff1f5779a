package safetensors

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"path/filepath"
	"strings"
	"testing"
)

// The bytes Encode writes are read back here by hand, following the
// format's specification, not through Decode: 8-byte little-endian header
// length, a JSON header whose entries give dtype, shape and data_offsets,
// space padding to an 8-byte boundary, packed little-endian data.
func TestEncodeMatchesSpec(t *testing.T) {
	a := F32("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", []int64{2, 3}, []float32{1, -2, 3.5, 0, 1e-3, -7})
	b := F32("b", []int64{3}, []float32{0.25, 0.5, 0.75})
	out, err := Encode([]Tensor{a, b}, map[string]string{"format": "pt"})
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(out[:8])
	if (8+n)%8 != 0 {
		t.Errorf("data starts at %d: not 8-byte aligned", 8+n)
	}
	header := out[8 : 8+n]
	if strings.TrimRight(string(header), " ") != strings.TrimSpace(string(header)) || header[0] != '{' {
		t.Errorf("header %q: want a JSON object padded with trailing spaces only", header)
	}
	var h map[string]json.RawMessage
	if err := json.Unmarshal(header, &h); err != nil {
		t.Fatal(err)
	}
	var meta map[string]string
	if err := json.Unmarshal(h["__metadata__"], &meta); err != nil || meta["format"] != "pt" {
		t.Errorf("__metadata__ = %s", h["__metadata__"])
	}
	data := out[8+n:]
	if len(data) != 4*(6+3) {
		t.Fatalf("%d data bytes, want 36", len(data))
	}
	for _, tc := range []struct {
		name  string
		shape []int64
		vals  []float32
	}{{a.Name, []int64{2, 3}, []float32{1, -2, 3.5, 0, 1e-3, -7}}, {"b", []int64{3}, []float32{0.25, 0.5, 0.75}}} {
		var e struct {
			DType       string  `json:"dtype"`
			Shape       []int64 `json:"shape"`
			DataOffsets []int64 `json:"data_offsets"`
		}
		if err := json.Unmarshal(h[tc.name], &e); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if e.DType != "F32" || len(e.Shape) != len(tc.shape) || len(e.DataOffsets) != 2 || e.DataOffsets[1]-e.DataOffsets[0] != int64(4*len(tc.vals)) {
			t.Errorf("%s: entry %+v", tc.name, e)
			continue
		}
		for i, want := range tc.vals {
			got := math.Float32frombits(binary.LittleEndian.Uint32(data[e.DataOffsets[0]+int64(4*i):]))
			if got != want {
				t.Errorf("%s[%d] = %v, want %v", tc.name, i, got, want)
			}
		}
	}
}

func TestRoundTripAndDTypes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.safetensors")
	want := []float32{1, -0.5, 65504, 1.0 / 1024}
	// The same values as F16 and BF16, written by hand.
	f16 := Tensor{Name: "h", DType: "F16", Shape: []int64{4}, Data: []byte{0x00, 0x3c, 0x00, 0xb8, 0xff, 0x7b, 0x00, 0x14}}
	bf16 := Tensor{Name: "bf", DType: "BF16", Shape: []int64{2}, Data: []byte{0x80, 0x3f, 0x00, 0xbf}}
	if err := WriteFile(path, []Tensor{F32("f", []int64{2, 2}, want), f16, bf16}, nil); err != nil {
		t.Fatal(err)
	}
	f, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Tensors) != 3 || f.Tensors[0].Name != "f" || f.Tensors[2].Name != "bf" {
		t.Fatalf("tensors %v, want f, h, bf in data order", f.Tensors)
	}
	for _, name := range []string{"f", "h"} {
		tn, _ := f.Get(name)
		v, err := tn.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		for i := range want {
			if v[i] != want[i] {
				t.Errorf("%s[%d] = %v, want %v", name, i, v[i], want[i])
			}
		}
	}
	tn, _ := f.Get("bf")
	if v, _ := tn.Float32s(); v[0] != 1 || v[1] != -0.5 {
		t.Errorf("bf16 = %v", v)
	}
}

func TestDecodeRejects(t *testing.T) {
	good, err := Encode([]Tensor{F32("a", []int64{2}, []float32{1, 2}), F32("b", []int64{1}, []float32{3})}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Decode(good); err != nil {
		t.Fatal(err)
	}
	withHeader := func(h string, data int) []byte {
		b := make([]byte, 8, 8+len(h)+data)
		binary.LittleEndian.PutUint64(b, uint64(len(h)))
		return append(append(b, h...), make([]byte, data)...)
	}
	for name, b := range map[string][]byte{
		"short":         good[:5],
		"huge length":   append([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, good[8:]...),
		"truncated":     good[:len(good)-1],
		"not an object": withHeader(`[1,2]   `, 0),
		"bad dtype":     withHeader(`{"a":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}}`, 4),
		"shape size":    withHeader(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`, 4),
		"gap":           withHeader(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8),
		"overlap":       withHeader(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, 4),
		"extra data":    withHeader(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, 8),
		"negative dim":  withHeader(`{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}`, 4),
	} {
		if _, err := Decode(b); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func FuzzDecode(f *testing.F) {
	good, _ := Encode([]Tensor{F32("a", []int64{2}, []float32{1, 2})}, map[string]string{"k": "v"})
	f.Add(good)
	f.Fuzz(func(t *testing.T, b []byte) {
		file, err := Decode(b)
		if err != nil {
			return
		}
		// Whatever decodes encodes again and decodes to the same tensors.
		again, err := Encode(file.Tensors, file.Metadata)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Decode(again); err != nil {
			t.Fatal(err)
		}
	})
}
