package llama

/*
#include "ggml.h"
#include "ggml-cpu.h"

// confclip_cpu_can_multiply says whether ggml's CPU backend has a dot
// product for type t: Q8_1, Q8_K and the integer types are only what
// activations are converted to, and a weight of such a type is a call
// through a null pointer in the first matrix product.
static int confclip_cpu_can_multiply(enum ggml_type t) {
	return ggml_get_type_traits_cpu(t)->vec_dot != NULL;
}
*/
import "C"

import (
	"os"
	"strings"

	"github.com/confclip/confclip/llama/precheck"
)

// PrecheckGGUF reads a GGUF file's header in Go and rejects what would make
// ggml's or llama.cpp's loader crash or allocate without bound (package
// precheck: lengths and counts larger than the file, invalid types, tensor
// data beyond the end of the file, keys of the wrong type, impossible
// hyper-parameters). The error names the file and the field.
func PrecheckGGUF(path string) error {
	_, err := precheckFile(path)
	return err
}

// precheckFile is PrecheckGGUF, with the header it read.
func precheckFile(path string) (*precheck.Header, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fileErr(path, "%v", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fileErr(path, "%v", err)
	}
	h, err := precheck.Read(f, st.Size(), ggmlTypes{})
	if err != nil {
		if strings.HasPrefix(err.Error(), "truncated") || strings.HasPrefix(err.Error(), "not a GGUF") {
			return nil, fileErr(path, "%v", err)
		}
		return nil, fileErr(path, "not a valid GGUF file: %v", err)
	}
	return h, nil
}

// ggmlTypes answers the pre-check's questions about tensor types from the
// ggml this binary links.
type ggmlTypes struct{}

func (ggmlTypes) Known(t uint32) bool {
	return t < C.GGML_TYPE_COUNT && C.ggml_blck_size(C.enum_ggml_type(t)) != 0
}

func (ggmlTypes) CanMultiply(t uint32) bool {
	return C.confclip_cpu_can_multiply(C.enum_ggml_type(t)) != 0
}

func (ggmlTypes) BlockSize(t uint32) uint64 { return uint64(C.ggml_blck_size(C.enum_ggml_type(t))) }
func (ggmlTypes) TypeSize(t uint32) uint64  { return uint64(C.ggml_type_size(C.enum_ggml_type(t))) }
func (ggmlTypes) Name(t uint32) string      { return C.GoString(C.ggml_type_name(C.enum_ggml_type(t))) }
