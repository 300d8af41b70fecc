package handoff

import (
	"net"
	"syscall"
)

// peerUID is the uid of the process at the other end (SO_PEERCRED, as it
// was when it connected).
func peerUID(uc *net.UnixConn) (uint32, error) {
	rc, err := uc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *syscall.Ucred
	var gerr error
	if err := rc.Control(func(fd uintptr) {
		cred, gerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if gerr != nil {
		return 0, gerr
	}
	return cred.Uid, nil
}
