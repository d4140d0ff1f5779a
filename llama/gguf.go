package llama

/*
#include <stdlib.h>
#include "ggml.h"
#include "gguf.h"
*/
import "C"

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"unsafe"

	"github.com/confclip/confclip/internal/atomicfile"
)

// GGUF is an open GGUF file's header: its key-value metadata and tensor
// table, read through ggml's gguf API without loading any tensor data.
type GGUF struct {
	path     string
	ctx      *C.struct_gguf_context
	fileSize int64
	cleanup  runtime.Cleanup
}

// TensorInfo describes one tensor of a GGUF file.
type TensorInfo struct {
	Name   string
	Type   string // ggml type name, e.g. "f32", "q4_K"
	Offset int64  // from the start of the data section
	Size   int64  // bytes
	// Elements is the tensor's value count (the product of its shape).
	Elements int64
}

// checkFile rejects what llama.cpp could trip on before any C code sees it:
// a missing path, a directory, an empty file, a file that is not GGUF.
func checkFile(path string) (int64, error) {
	st, err := os.Stat(path)
	if err != nil {
		if os.IsNotExist(err) {
			return 0, &FileError{Path: path, Reason: "no such file", Err: err}
		}
		return 0, fileErr(path, "%v", err)
	}
	if st.IsDir() {
		return 0, fileErr(path, "is a directory, not a GGUF file")
	}
	if st.Size() == 0 {
		return 0, fileErr(path, "empty file, not a GGUF file")
	}
	f, err := os.Open(path)
	if err != nil {
		return 0, fileErr(path, "%v", err)
	}
	defer f.Close()
	var magic [4]byte
	if _, err := io.ReadFull(f, magic[:]); err != nil || !bytes.Equal(magic[:], []byte("GGUF")) {
		return 0, fileErr(path, "not a GGUF file (bad magic)")
	}
	return st.Size(), nil
}

// OpenGGUF reads the header of a GGUF file and checks that the file holds all
// of its tensors' data (a truncated file is an error, not a crash later).
func OpenGGUF(path string) (*GGUF, error) {
	Init()
	size, err := checkFile(path)
	if err != nil {
		return nil, err
	}
	// ggml's reader trusts the file's lengths and asserts on some bad
	// values: the Go pre-check sees every file first.
	if err := PrecheckGGUF(path); err != nil {
		return nil, err
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var ctx *C.struct_gguf_context
	msg := call(func() { ctx = C.gguf_init_from_file(cpath, C.struct_gguf_init_params{no_alloc: true}) })
	if ctx == nil {
		return nil, fileErr(path, "%s", because("not a valid GGUF file", msg))
	}
	g := &GGUF{path: path, ctx: ctx, fileSize: size}
	g.cleanup = runtime.AddCleanup(g, func(c *C.struct_gguf_context) { C.gguf_free(c) }, ctx)
	var end int64
	data := int64(C.gguf_get_data_offset(ctx))
	for _, t := range g.Tensors() {
		if e := data + t.Offset + t.Size; e > end {
			end = e
		}
	}
	if end > size {
		_ = g.Close() // never fails
		return nil, fileErr(path, "truncated: tensor data needs %d bytes, the file has %d", end, size)
	}
	return g, nil
}

// Close frees the header. It is safe to call twice; a GGUF that is never
// closed is freed when it becomes unreachable.
func (g *GGUF) Close() error {
	if g.ctx != nil {
		g.cleanup.Stop()
		C.gguf_free(g.ctx)
		g.ctx = nil
	}
	return nil
}

// with runs f on the open header and keeps it alive until f returns; on a
// closed one f never runs (the getters then return zero values).
func (g *GGUF) with(f func(*C.struct_gguf_context)) {
	defer runtime.KeepAlive(g)
	if g != nil && g.ctx != nil {
		f(g.ctx)
	}
}

// Path is the file's path.
func (g *GGUF) Path() string { return g.path }

// FileSize is the file's size in bytes.
func (g *GGUF) FileSize() int64 { return g.fileSize }

// Keys lists the metadata keys in file order.
func (g *GGUF) Keys() []string {
	var keys []string
	g.with(func(gc *C.struct_gguf_context) {
		keys = make([]string, int(C.gguf_get_n_kv(gc)))
		for i := range keys {
			keys[i] = C.GoString(C.gguf_get_key(gc, C.int64_t(i)))
		}
	})
	return keys
}

// Get returns a scalar metadata value (string, bool, int64, uint64 or
// float64), or for an array its length as ArrayLen. ok is false when the key
// is absent (or the header closed).
func (g *GGUF) Get(key string) (v any, ok bool) {
	g.with(func(gc *C.struct_gguf_context) { v, ok = ggufGet(gc, key) })
	return v, ok
}

func ggufGet(ctx *C.struct_gguf_context, key string) (any, bool) {
	ck := C.CString(key)
	defer C.free(unsafe.Pointer(ck))
	id := C.gguf_find_key(ctx, ck)
	if id < 0 {
		return nil, false
	}
	switch C.gguf_get_kv_type(ctx, id) {
	case C.GGUF_TYPE_UINT8:
		return uint64(C.gguf_get_val_u8(ctx, id)), true
	case C.GGUF_TYPE_INT8:
		return int64(C.gguf_get_val_i8(ctx, id)), true
	case C.GGUF_TYPE_UINT16:
		return uint64(C.gguf_get_val_u16(ctx, id)), true
	case C.GGUF_TYPE_INT16:
		return int64(C.gguf_get_val_i16(ctx, id)), true
	case C.GGUF_TYPE_UINT32:
		return uint64(C.gguf_get_val_u32(ctx, id)), true
	case C.GGUF_TYPE_INT32:
		return int64(C.gguf_get_val_i32(ctx, id)), true
	case C.GGUF_TYPE_UINT64:
		return uint64(C.gguf_get_val_u64(ctx, id)), true
	case C.GGUF_TYPE_INT64:
		return int64(C.gguf_get_val_i64(ctx, id)), true
	case C.GGUF_TYPE_FLOAT32:
		return float64(C.gguf_get_val_f32(ctx, id)), true
	case C.GGUF_TYPE_FLOAT64:
		return float64(C.gguf_get_val_f64(ctx, id)), true
	case C.GGUF_TYPE_BOOL:
		return bool(C.gguf_get_val_bool(ctx, id)), true
	case C.GGUF_TYPE_STRING:
		return C.GoString(C.gguf_get_val_str(ctx, id)), true
	case C.GGUF_TYPE_ARRAY:
		return ArrayLen(C.gguf_get_arr_n(ctx, id)), true
	}
	return nil, false
}

// ArrayLen stands for an array value in Get's result.
type ArrayLen int

// String returns a string value, or "" when the key is absent or not a string.
func (g *GGUF) String(key string) string {
	v, _ := g.Get(key)
	s, _ := v.(string)
	return s
}

// Uint returns an integer value, or def when the key is absent.
func (g *GGUF) Uint(key string, def uint64) uint64 {
	switch v, _ := g.Get(key); v := v.(type) {
	case uint64:
		return v
	case int64:
		return uint64(v)
	}
	return def
}

// Tensors lists the tensor table.
func (g *GGUF) Tensors() []TensorInfo {
	var ts []TensorInfo
	g.with(func(gc *C.struct_gguf_context) {
		ts = make([]TensorInfo, int(C.gguf_get_n_tensors(gc)))
		for i := range ts {
			id := C.int64_t(i)
			typ := C.gguf_get_tensor_type(gc, id)
			size := int64(C.gguf_get_tensor_size(gc, id))
			ts[i] = TensorInfo{
				Name:     C.GoString(C.gguf_get_tensor_name(gc, id)),
				Type:     C.GoString(C.ggml_type_name(typ)),
				Offset:   int64(C.gguf_get_tensor_offset(gc, id)),
				Size:     size,
				Elements: size / int64(C.ggml_type_size(typ)) * int64(C.ggml_blck_size(typ)),
			}
		}
	})
	return ts
}

// GGUFWriter builds a GGUF file: metadata and F32 tensors, written with
// ggml's gguf API. It is not safe for concurrent use. After Close its setters
// do nothing and WriteFile returns ErrClosed.
type GGUFWriter struct {
	r       *writerRes
	err     error
	cleanup runtime.Cleanup
}

// writerRes is a writer's C memory, freed by Close or, for a writer dropped
// without Close, by its cleanup.
type writerRes struct {
	ctx  *C.struct_gguf_context
	ggml []*C.struct_ggml_context // one per tensor, holding its data
}

func (r *writerRes) free() {
	if r.ctx != nil {
		C.gguf_free(r.ctx)
		r.ctx = nil
	}
	for _, g := range r.ggml {
		C.ggml_free(g)
	}
	r.ggml = nil
}

// NewGGUFWriter starts an empty GGUF file.
func NewGGUFWriter() *GGUFWriter {
	Init()
	w := &GGUFWriter{r: &writerRes{ctx: C.gguf_init_empty()}}
	if w.r.ctx == nil {
		w.err = fmt.Errorf("llama: out of memory for a GGUF writer")
		return w
	}
	w.cleanup = runtime.AddCleanup(w, (*writerRes).free, w.r)
	return w
}

// set runs f with the open writer's context and key k as a C string, and
// keeps the writer alive until f returns. On a closed writer it records
// ErrClosed for WriteFile and f never runs.
func (w *GGUFWriter) set(k string, f func(ctx *C.struct_gguf_context, ck *C.char)) {
	defer runtime.KeepAlive(w)
	if w.r.ctx == nil {
		if w.err == nil {
			w.err = ErrClosed
		}
		return
	}
	ck := C.CString(k)
	defer C.free(unsafe.Pointer(ck))
	f(w.r.ctx, ck)
}

// SetString sets a string value.
func (w *GGUFWriter) SetString(k, v string) {
	w.set(k, func(ctx *C.struct_gguf_context, ck *C.char) {
		cv := C.CString(v)
		defer C.free(unsafe.Pointer(cv))
		C.gguf_set_val_str(ctx, ck, cv)
	})
}

// SetUint32 sets a uint32 value.
func (w *GGUFWriter) SetUint32(k string, v uint32) {
	w.set(k, func(ctx *C.struct_gguf_context, ck *C.char) { C.gguf_set_val_u32(ctx, ck, C.uint32_t(v)) })
}

// SetInt32 sets an int32 value.
func (w *GGUFWriter) SetInt32(k string, v int32) {
	w.set(k, func(ctx *C.struct_gguf_context, ck *C.char) { C.gguf_set_val_i32(ctx, ck, C.int32_t(v)) })
}

// SetFloat32 sets a float32 value.
func (w *GGUFWriter) SetFloat32(k string, v float32) {
	w.set(k, func(ctx *C.struct_gguf_context, ck *C.char) { C.gguf_set_val_f32(ctx, ck, C.float(v)) })
}

// SetBool sets a bool value.
func (w *GGUFWriter) SetBool(k string, v bool) {
	w.set(k, func(ctx *C.struct_gguf_context, ck *C.char) { C.gguf_set_val_bool(ctx, ck, C.bool(v)) })
}

// SetStrings sets an array of strings.
func (w *GGUFWriter) SetStrings(k string, vs []string) {
	w.set(k, func(ctx *C.struct_gguf_context, ck *C.char) {
		// Go memory holding only C pointers: cgo lets C read it during the
		// call, and every store is into an initialised Go slot.
		arr := make([]*C.char, len(vs)+1)
		defer func() {
			for _, p := range arr {
				C.free(unsafe.Pointer(p))
			}
		}()
		for i, s := range vs {
			arr[i] = C.CString(s)
		}
		C.gguf_set_arr_str(ctx, ck, &arr[0], C.size_t(len(vs)))
	})
}

// SetFloat32s sets an array of float32.
func (w *GGUFWriter) SetFloat32s(k string, vs []float32) {
	w.set(k, func(ctx *C.struct_gguf_context, ck *C.char) {
		var p unsafe.Pointer
		if len(vs) > 0 {
			p = unsafe.Pointer(&vs[0]) // no pointers inside: cgo passes it as is
		}
		C.gguf_set_arr_data(ctx, ck, C.GGUF_TYPE_FLOAT32, p, C.size_t(len(vs)))
	})
}

// SetInt32s sets an array of int32.
func (w *GGUFWriter) SetInt32s(k string, vs []int32) {
	w.set(k, func(ctx *C.struct_gguf_context, ck *C.char) {
		var p unsafe.Pointer
		if len(vs) > 0 {
			p = unsafe.Pointer(&vs[0])
		}
		C.gguf_set_arr_data(ctx, ck, C.GGUF_TYPE_INT32, p, C.size_t(len(vs)))
	})
}

// SetBools sets an array of bool (gemma4's sliding_window_pattern).
func (w *GGUFWriter) SetBools(k string, vs []bool) {
	w.set(k, func(ctx *C.struct_gguf_context, ck *C.char) {
		var p unsafe.Pointer
		if len(vs) > 0 {
			p = unsafe.Pointer(&vs[0]) // a Go bool is one byte, as GGUF's
		}
		C.gguf_set_arr_data(ctx, ck, C.GGUF_TYPE_BOOL, p, C.size_t(len(vs)))
	})
}

// AddTensorF32 adds an F32 tensor. shape is in ggml order (ne0 first: for a
// weight matrix, ne0 is the input size and ne1 the output size).
func (w *GGUFWriter) AddTensorF32(name string, shape []int64, data []float32) {
	if w.err != nil {
		return
	}
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	if len(shape) == 0 || len(shape) > 4 || n != int64(len(data)) {
		w.err = fmt.Errorf("tensor %s: shape %v does not hold %d values", name, shape, len(data))
		return
	}
	if len(name) >= C.GGML_MAX_NAME {
		w.err = fmt.Errorf("tensor %s: name longer than %d bytes", name, C.GGML_MAX_NAME-1)
		return
	}
	w.set(name, func(ctx *C.struct_gguf_context, cn *C.char) {
		mem := C.size_t(C.ggml_tensor_overhead()) + C.size_t(4*n) + 64
		gctx := C.ggml_init(C.struct_ggml_init_params{mem_size: mem, mem_buffer: nil, no_alloc: false})
		if gctx == nil {
			w.err = fmt.Errorf("tensor %s: out of memory for %d values", name, n)
			return
		}
		w.r.ggml = append(w.r.ggml, gctx)
		var ne [4]C.int64_t
		for i, d := range shape {
			ne[i] = C.int64_t(d)
		}
		t := C.ggml_new_tensor(gctx, C.GGML_TYPE_F32, C.int(len(shape)), &ne[0])
		C.ggml_set_name(t, cn)
		if n > 0 {
			copy(unsafe.Slice((*float32)(t.data), n), data)
		}
		C.gguf_add_tensor(ctx, t)
	})
}

// WriteFile writes the file through a temporary file and a rename, so a
// failure never leaves a half-written GGUF at path.
func (w *GGUFWriter) WriteFile(path string) error {
	if w.err != nil {
		return w.err
	}
	defer runtime.KeepAlive(w)
	if w.r.ctx == nil {
		return ErrClosed
	}
	if err := checkSpace(filepath.Dir(path), w.ggufFileSize()); err != nil {
		return fileErr(path, "%v", err)
	}
	// Through atomicfile for what an output path means (links followed,
	// devices written through, mode, leftovers of a killed write); C
	// writes the bytes to the file it names.
	f, err := atomicfile.Create(path)
	if err != nil {
		return err
	}
	cpath := C.CString(f.Name())
	defer C.free(unsafe.Pointer(cpath))
	var ok C.bool
	msg := call(func() { ok = C.gguf_write_to_file(w.r.ctx, cpath, false) })
	if !ok {
		err := writeFailed(path, msg)
		f.Abort()
		return err
	}
	return f.Commit()
}

// Close frees the writer's memory. It is safe to call twice.
func (w *GGUFWriter) Close() error {
	if w.r.ctx != nil {
		w.cleanup.Stop()
		w.r.free()
	}
	return nil
}
