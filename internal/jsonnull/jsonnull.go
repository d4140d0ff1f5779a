// Package jsonnull marshals JSON like encoding/json, except that a float
// that is NaN or ±Inf (a metric with no data, a ratio over zero) is written
// as null instead of failing the whole value: encoding/json refuses such a
// float, and a caller that dropped that error wrote an empty file.
package jsonnull

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
)

// Marshal is json.Marshal with non-finite floats written as null.
func Marshal(v any) ([]byte, error) { return MarshalIndent(v, "", "") }

// MarshalIndent is json.MarshalIndent with non-finite floats written as
// null.
func MarshalIndent(v any, prefix, indent string) ([]byte, error) {
	b, err := marshal(v, prefix, indent)
	var uv *json.UnsupportedValueError
	if err == nil || !errors.As(err, &uv) {
		return b, err
	}
	// A copy with every non-finite float replaced by a sentinel that the
	// encoder prints one way, which then becomes null. Fields json does not
	// write (unexported ones) are left zero in the copy.
	rv := reflect.ValueOf(v)
	if found(rv, 0) {
		return nil, fmt.Errorf("jsonnull: the value holds the sentinel %g itself", sentinel)
	}
	b, err = marshal(finite(rv, 0).Interface(), prefix, indent)
	if err != nil {
		return nil, err
	}
	for _, s := range [][]byte{sentinel64Bytes, sentinel32Bytes} {
		b = bytes.ReplaceAll(b, s, []byte("null"))
	}
	return b, nil
}

func marshal(v any, prefix, indent string) ([]byte, error) {
	if prefix == "" && indent == "" {
		return json.Marshal(v)
	}
	return json.MarshalIndent(v, prefix, indent)
}

// sentinel is the float64 next above -MaxFloat64 (-MaxFloat64 itself is a
// common stand-in for -Inf), sentinel32 its float32 counterpart; the encoder
// prints them as these bytes, which appear nowhere else in JSON of other
// values unless the value holds them (found refuses that).
var (
	sentinel   = math.Nextafter(-math.MaxFloat64, 0)
	sentinel32 = math.Nextafter32(-math.MaxFloat32, 0)

	sentinel64Bytes = []byte("-1.7976931348623155e+308")
	sentinel32Bytes = []byte("-3.4028233e+38")
)

// maxDepth bounds the walk (a cyclic value would make json fail anyway).
const maxDepth = 1000

func found(v reflect.Value, depth int) bool {
	if depth > maxDepth || !v.IsValid() {
		return false
	}
	switch v.Kind() {
	case reflect.Float64:
		return v.Float() == sentinel
	case reflect.Float32:
		return float32(v.Float()) == sentinel32
	case reflect.Pointer, reflect.Interface:
		return !v.IsNil() && found(v.Elem(), depth+1)
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() && found(v.Field(i), depth+1) {
				return true
			}
		}
	case reflect.Slice, reflect.Array:
		for i := 0; i < v.Len(); i++ {
			if found(v.Index(i), depth+1) {
				return true
			}
		}
	case reflect.Map:
		for it := v.MapRange(); it.Next(); {
			if found(it.Value(), depth+1) {
				return true
			}
		}
	}
	return false
}

// finite returns a copy of v with NaN and ±Inf replaced by the sentinel.
// Values that marshal themselves (json.Marshaler, encoding.TextMarshaler)
// are kept as they are.
func finite(v reflect.Value, depth int) reflect.Value {
	if depth > maxDepth || !v.IsValid() {
		return v
	}
	t := v.Type()
	if t.Implements(marshalerType) || t.Implements(textMarshalerType) {
		return v
	}
	switch v.Kind() {
	case reflect.Float32, reflect.Float64:
		if f := v.Float(); math.IsNaN(f) || math.IsInf(f, 0) {
			out := reflect.New(t).Elem()
			if v.Kind() == reflect.Float32 {
				out.SetFloat(float64(sentinel32))
			} else {
				out.SetFloat(sentinel)
			}
			return out
		}
		return v
	case reflect.Pointer:
		if v.IsNil() {
			return v
		}
		out := reflect.New(t.Elem())
		out.Elem().Set(finite(v.Elem(), depth+1))
		return out
	case reflect.Interface:
		if v.IsNil() {
			return v
		}
		out := reflect.New(t).Elem()
		out.Set(finite(v.Elem(), depth+1))
		return out
	case reflect.Struct:
		out := reflect.New(t).Elem()
		for i := 0; i < v.NumField(); i++ {
			if t.Field(i).IsExported() {
				out.Field(i).Set(finite(v.Field(i), depth+1))
			}
		}
		return out
	case reflect.Slice:
		if v.IsNil() {
			return v
		}
		out := reflect.MakeSlice(t, v.Len(), v.Len())
		for i := 0; i < v.Len(); i++ {
			out.Index(i).Set(finite(v.Index(i), depth+1))
		}
		return out
	case reflect.Array:
		out := reflect.New(t).Elem()
		for i := 0; i < v.Len(); i++ {
			out.Index(i).Set(finite(v.Index(i), depth+1))
		}
		return out
	case reflect.Map:
		if v.IsNil() {
			return v
		}
		out := reflect.MakeMapWithSize(t, v.Len())
		for it := v.MapRange(); it.Next(); {
			out.SetMapIndex(it.Key(), finite(it.Value(), depth+1))
		}
		return out
	}
	return v
}

var (
	marshalerType     = reflect.TypeFor[json.Marshaler]()
	textMarshalerType = reflect.TypeFor[interface{ MarshalText() ([]byte, error) }]()
)
