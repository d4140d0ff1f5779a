package peakrss

import (
	"runtime"
	"runtime/debug"
	"testing"
)

// TestReset: a peak made by touching 256 MiB is there before Reset and
// gone after it (the memory freed in between).
func TestReset(t *testing.T) {
	if Bytes() == 0 {
		t.Skip("NOT RUN: no /proc/self/status VmHWM here")
	}
	buf := make([]byte, 256<<20)
	for i := 0; i < len(buf); i += 4096 {
		buf[i] = 1
	}
	high := Bytes()
	runtime.KeepAlive(buf)
	buf = nil
	debug.FreeOSMemory()
	if err := Reset(); err != nil {
		t.Fatal(err)
	}
	if low := Bytes(); low > high-128<<20 {
		t.Fatalf("peak %d MiB after Reset, %d MiB before: not reset", low>>20, high>>20)
	}
}
