package verifiers

import "syscall"

// prSetChildSubreaper is prctl's PR_SET_CHILD_SUBREAPER.
const prSetChildSubreaper = 36

// becomeSubreaper makes the orphans of this process's descendants its
// children (best effort).
func becomeSubreaper() { syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0) }
