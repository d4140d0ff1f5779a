package llama

/*
#include "gguf.h"
*/
import "C"

import (
	"fmt"
	"path/filepath"
	"syscall"
)

// ggufFileSize is the size of the file w would write: its header and
// metadata, then each tensor's data padded to the alignment.
func (w *GGUFWriter) ggufFileSize() uint64 {
	size := uint64(C.gguf_get_meta_size(w.r.ctx))
	align := uint64(C.gguf_get_alignment(w.r.ctx))
	for i := C.int64_t(0); i < C.gguf_get_n_tensors(w.r.ctx); i++ {
		size += (uint64(C.gguf_get_tensor_size(w.r.ctx, i)) + align - 1) &^ (align - 1)
	}
	return size
}

// checkSpace says, before a file of need bytes is written in dir, when the
// disk does not have them: llama.cpp's writer would only report
// "unexpected fwrite number of bytes written" once the disk is full.
func checkSpace(dir string, need uint64) error {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return nil // unknown: the write itself will tell
	}
	if free := st.Bavail * uint64(st.Bsize); free < need {
		return fmt.Errorf("the disk holding %s is too full: the file needs %d bytes, %d are free", dir, need, free)
	}
	return nil
}

// writeFailed is the error of a failed GGUF write: a full disk is named.
func writeFailed(path, msg string) error {
	var st syscall.Statfs_t
	if syscall.Statfs(filepath.Dir(path), &st) == nil && st.Bavail*uint64(st.Bsize) < 1<<20 {
		return fileErr(path, "writing GGUF failed: the disk is full (%s)", msg)
	}
	return fileErr(path, "%s", because("writing GGUF failed", msg))
}
