package llama

/*
#include <malloc.h>
static long long confclip_heap_in_use(void) {
	struct mallinfo2 mi = mallinfo2();
	return (long long)(mi.uordblks + mi.hblkhd);
}
static void confclip_malloc_trim(void) { malloc_trim(0); }
*/
import "C"

// CHeapInUse is the number of bytes the C heap has handed out and not taken
// back (glibc's mallinfo2: in-use arena bytes plus mmapped blocks). Unlike
// the process's RSS it does not count memory freed but kept by the allocator,
// so it tells a leak from fragmentation.
func CHeapInUse() int64 { return int64(C.confclip_heap_in_use()) }

// MallocTrim asks the C allocator to give freed memory back to the system
// (glibc's malloc_trim), in every arena.
func MallocTrim() { C.confclip_malloc_trim() }
