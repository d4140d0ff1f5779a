package llama

/*
#include <stdlib.h>
#include "llama.h"
*/
import "C"

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"unsafe"
)

// quantTypes are the file types Quantize writes, by name.
// The IQ types of two bits or fewer (IQ1_*, IQ2_*) and Q2_K_S are left out:
// llama.cpp's quantizer writes them only with an importance matrix.
var quantTypes = map[string]C.enum_llama_ftype{
	"f32": C.LLAMA_FTYPE_ALL_F32, "f16": C.LLAMA_FTYPE_MOSTLY_F16, "q8_0": C.LLAMA_FTYPE_MOSTLY_Q8_0, "q4_0": C.LLAMA_FTYPE_MOSTLY_Q4_0,
	"q4_1": C.LLAMA_FTYPE_MOSTLY_Q4_1, "q5_0": C.LLAMA_FTYPE_MOSTLY_Q5_0, "q5_1": C.LLAMA_FTYPE_MOSTLY_Q5_1,
	"q2_k": C.LLAMA_FTYPE_MOSTLY_Q2_K, "q3_k_m": C.LLAMA_FTYPE_MOSTLY_Q3_K_M, "q4_k_s": C.LLAMA_FTYPE_MOSTLY_Q4_K_S,
	"q4_k_m": C.LLAMA_FTYPE_MOSTLY_Q4_K_M, "q5_k_s": C.LLAMA_FTYPE_MOSTLY_Q5_K_S, "q5_k_m": C.LLAMA_FTYPE_MOSTLY_Q5_K_M,
	"q6_k": C.LLAMA_FTYPE_MOSTLY_Q6_K, "iq3_s": C.LLAMA_FTYPE_MOSTLY_IQ3_S, "iq3_m": C.LLAMA_FTYPE_MOSTLY_IQ3_M,
	"iq4_nl": C.LLAMA_FTYPE_MOSTLY_IQ4_NL, "iq4_xs": C.LLAMA_FTYPE_MOSTLY_IQ4_XS,
}

// QuantTypes lists the names Quantize accepts.
func QuantTypes() []string {
	var names []string
	for n := range quantTypes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Quantize writes a quantized copy of a model with llama.cpp's quantizer
// (through a temporary file and a rename). Weight matrices whose rows do not
// fit the type's block size are kept as they are by llama.cpp. A quantized
// input is dequantized and quantized again (llama.cpp's --allow-requantize):
// the copy carries both types' rounding.
func Quantize(in, out, typ string, threads int) error {
	ft, ok := quantTypes[strings.ToLower(typ)]
	if !ok {
		return fmt.Errorf("quantization type %q: want one of %v", typ, QuantTypes())
	}
	g, err := OpenGGUF(in)
	if err != nil {
		return err
	}
	g.Close()
	tmp, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".tmp-*")
	if err != nil {
		return err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	p := C.llama_model_quantize_default_params()
	p.ftype = ft
	p.nthread = C.int32_t(threads)
	p.allow_requantize = true
	cin, cout := C.CString(in), C.CString(tmp.Name())
	defer C.free(unsafe.Pointer(cin))
	defer C.free(unsafe.Pointer(cout))
	var rc C.uint32_t
	msg := call(func() { rc = C.llama_model_quantize(cin, cout, &p) })
	if rc != 0 {
		return fileErr(in, "%s", because(fmt.Sprintf("quantizing to %s failed", typ), msg))
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil { // CreateTemp's 0600 is for the half-written file only
		return err
	}
	return os.Rename(tmp.Name(), out)
}
