// Package safetensors reads and writes Hugging Face's safetensors format:
// an 8-byte little-endian header length N, N bytes of JSON header (padded
// with spaces so that the data starts 8-byte aligned) mapping each tensor's
// name to {dtype, shape, data_offsets} (offsets into the data that follows),
// and an optional "__metadata__" object of strings; then the tensors' bytes,
// little-endian, row-major, packed without gaps. Pure Go, no dependencies;
// PEFT adapters (adapter_model.safetensors) go through it.
package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"sort"

	"github.com/confclip/confclip/internal/atomicfile"
)

// MaxHeader bounds the JSON header, as the reference implementation does
// (100 MB), so that a corrupt length cannot ask for gigabytes.
const MaxHeader = 100 << 20

// dtypeSize is the byte size of each element type the format names.
var dtypeSize = map[string]int{
	"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1,
	"I16": 2, "U16": 2, "F16": 2, "BF16": 2,
	"I32": 4, "U32": 4, "F32": 4,
	"I64": 8, "U64": 8, "F64": 8,
}

// Tensor is one named tensor: Shape in row-major order (the first
// dimension is the slowest), Data its little-endian bytes.
type Tensor struct {
	Name  string
	DType string
	Shape []int64
	Data  []byte
}

// File is a decoded safetensors file: its tensors in data order and its
// metadata.
type File struct {
	Tensors  []Tensor
	Metadata map[string]string
}

// Get returns the tensor of that name.
func (f *File) Get(name string) (Tensor, bool) {
	for _, t := range f.Tensors {
		if t.Name == name {
			return t, true
		}
	}
	return Tensor{}, false
}

// F32 makes a float32 tensor.
func F32(name string, shape []int64, v []float32) Tensor {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return Tensor{Name: name, DType: "F32", Shape: shape, Data: b}
}

// Elements is the number of elements the shape holds.
func (t Tensor) Elements() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// Float32s converts a floating-point tensor (F32, F16, BF16 or F64) to
// float32 values.
func (t Tensor) Float32s() ([]float32, error) {
	n := int(t.Elements())
	size, ok := dtypeSize[t.DType]
	if !ok || len(t.Data) != n*size {
		return nil, fmt.Errorf("tensor %s: %d bytes for %v %s", t.Name, len(t.Data), t.Shape, t.DType)
	}
	v := make([]float32, n)
	d := t.Data
	switch t.DType {
	case "F32":
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(d[4*i:]))
		}
	case "F64":
		for i := range v {
			v[i] = float32(math.Float64frombits(binary.LittleEndian.Uint64(d[8*i:])))
		}
	case "BF16":
		for i := range v {
			v[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(d[2*i:])) << 16)
		}
	case "F16":
		for i := range v {
			v[i] = halfToFloat(binary.LittleEndian.Uint16(d[2*i:]))
		}
	default:
		return nil, fmt.Errorf("tensor %s is %s: want a floating-point type (F32, F16, BF16, F64)", t.Name, t.DType)
	}
	return v, nil
}

// halfToFloat converts an IEEE 754 half-precision value exactly.
func halfToFloat(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := int(h>>10) & 0x1f
	frac := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f: // inf, NaN
		return math.Float32frombits(sign | 0xff<<23 | frac<<13)
	case exp == 0 && frac == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal: frac * 2^-24
		f := float32(frac) * float32(math.Ldexp(1, -24))
		if sign != 0 {
			f = -f
		}
		return f
	}
	return math.Float32frombits(sign | uint32(exp-15+127)<<23 | frac<<13)
}

type headerEntry struct {
	DType       string   `json:"dtype"`
	Shape       []int64  `json:"shape"`
	DataOffsets [2]int64 `json:"data_offsets"`
}

// Encode serialises tensors, in the order given, and metadata (may be nil).
func Encode(tensors []Tensor, metadata map[string]string) ([]byte, error) {
	header := map[string]any{}
	if len(metadata) > 0 {
		header["__metadata__"] = metadata
	}
	var off int64
	for _, t := range tensors {
		size, ok := dtypeSize[t.DType]
		if !ok {
			return nil, fmt.Errorf("tensor %s: unknown dtype %q", t.Name, t.DType)
		}
		if t.Name == "" || t.Name == "__metadata__" {
			return nil, fmt.Errorf("tensor name %q is not allowed", t.Name)
		}
		if _, dup := header[t.Name]; dup {
			return nil, fmt.Errorf("tensor %s appears twice", t.Name)
		}
		if want := t.Elements() * int64(size); int64(len(t.Data)) != want {
			return nil, fmt.Errorf("tensor %s: %d bytes, its shape %v of %s needs %d", t.Name, len(t.Data), t.Shape, t.DType, want)
		}
		shape := t.Shape
		if shape == nil {
			shape = []int64{}
		}
		header[t.Name] = headerEntry{DType: t.DType, Shape: shape, DataOffsets: [2]int64{off, off + int64(len(t.Data))}}
		off += int64(len(t.Data))
	}
	h, err := json.Marshal(header) // keys sorted: the same tensors give the same bytes
	if err != nil {
		return nil, err
	}
	// Pad with spaces so that the data starts at an 8-byte boundary.
	for (8+len(h))%8 != 0 {
		h = append(h, ' ')
	}
	out := make([]byte, 8, 8+len(h)+int(off))
	binary.LittleEndian.PutUint64(out, uint64(len(h)))
	out = append(out, h...)
	for _, t := range tensors {
		out = append(out, t.Data...)
	}
	return out, nil
}

// WriteFile writes the file through a temporary file and a rename.
func WriteFile(path string, tensors []Tensor, metadata map[string]string) error {
	b, err := Encode(tensors, metadata)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return atomicfile.WriteBytes(path, b)
}

// ReadFile reads and checks a whole file.
func ReadFile(path string) (*File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	f, err := Decode(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// Decode parses a file's bytes and checks them against the format: the
// header length within the file, a JSON object, known dtypes, offsets that
// match each shape and cover the data exactly, without gaps or overlaps.
func Decode(b []byte) (*File, error) {
	if len(b) < 8 {
		return nil, fmt.Errorf("%d bytes: too short for the 8-byte header length", len(b))
	}
	n := binary.LittleEndian.Uint64(b)
	if n > MaxHeader || n > uint64(len(b)-8) {
		return nil, fmt.Errorf("header length %d: the file has %d bytes after the length (and at most %d are allowed)", n, len(b)-8, MaxHeader)
	}
	hb := b[8 : 8+n]
	if len(bytes.TrimSpace(hb)) == 0 || bytes.TrimSpace(hb)[0] != '{' {
		return nil, errors.New("the header is not a JSON object")
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(hb, &raw); err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	data := b[8+n:]
	f := &File{}
	if m, ok := raw["__metadata__"]; ok {
		if err := json.Unmarshal(m, &f.Metadata); err != nil {
			return nil, fmt.Errorf("__metadata__: want an object of strings: %w", err)
		}
		delete(raw, "__metadata__")
	}
	type span struct {
		lo, hi int64
		name   string
		t      Tensor
	}
	var spans []span
	for name, r := range raw {
		var e headerEntry
		dec := json.NewDecoder(bytes.NewReader(r))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&e); err != nil {
			return nil, fmt.Errorf("tensor %s: %w", name, err)
		}
		size, ok := dtypeSize[e.DType]
		if !ok {
			return nil, fmt.Errorf("tensor %s: unknown dtype %q", name, e.DType)
		}
		elems := int64(1)
		for _, d := range e.Shape {
			if d < 0 || d > 1<<40 {
				return nil, fmt.Errorf("tensor %s: bad dimension %d", name, d)
			}
			elems *= d
			if elems > 1<<50 {
				return nil, fmt.Errorf("tensor %s: shape %v too large", name, e.Shape)
			}
		}
		lo, hi := e.DataOffsets[0], e.DataOffsets[1]
		if lo < 0 || hi < lo || hi > int64(len(data)) {
			return nil, fmt.Errorf("tensor %s: data_offsets [%d, %d] outside the %d bytes of data", name, lo, hi, len(data))
		}
		if hi-lo != elems*int64(size) {
			return nil, fmt.Errorf("tensor %s: data_offsets [%d, %d] hold %d bytes, its shape %v of %s needs %d", name, lo, hi, hi-lo, e.Shape, e.DType, elems*int64(size))
		}
		spans = append(spans, span{lo, hi, name, Tensor{Name: name, DType: e.DType, Shape: e.Shape, Data: data[lo:hi:hi]}})
	}
	sort.Slice(spans, func(i, j int) bool {
		return spans[i].lo < spans[j].lo || spans[i].lo == spans[j].lo && spans[i].hi < spans[j].hi
	})
	var end int64
	for _, s := range spans {
		if s.lo != end {
			return nil, fmt.Errorf("tensor %s starts at %d: the data must be packed without gaps or overlaps (expected %d)", s.name, s.lo, end)
		}
		end = s.hi
		f.Tensors = append(f.Tensors, s.t)
	}
	if end != int64(len(data)) {
		return nil, fmt.Errorf("the tensors cover %d of the %d bytes of data", end, len(data))
	}
	return f, nil
}
