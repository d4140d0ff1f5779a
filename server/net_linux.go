package server

import (
	"syscall"
)

// tcpUserTimeout is TCP_USER_TIMEOUT of linux/tcp.h (the syscall package
// does not name it).
const tcpUserTimeout = 0x12

// setUserTimeout sets TCP_USER_TIMEOUT (userTimeout) on a socket, as a
// net.Dialer's Control.
func setUserTimeout(_, _ string, c syscall.RawConn) error {
	var err error
	if cerr := c.Control(func(fd uintptr) {
		err = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpUserTimeout, int(userTimeout.Milliseconds()))
	}); cerr != nil {
		return cerr
	}
	return err
}
