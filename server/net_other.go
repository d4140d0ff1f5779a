//go:build !linux

package server

import "syscall"

// setUserTimeout does nothing where TCP_USER_TIMEOUT is not Linux's: TCP
// keepalive alone bounds a silent peer there.
func setUserTimeout(_, _ string, _ syscall.RawConn) error { return nil }
