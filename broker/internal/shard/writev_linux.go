package shard

import (
	"syscall"
	"unsafe"
)

// tryWritev writes as much of vec as the socket takes at once, never
// waiting for it to become writable: n is 0, with no error, when its send
// buffer is full. iov is the caller's scratch, returned for reuse.
func tryWritev(rc syscall.RawConn, vec [][]byte, iov []syscall.Iovec) (n int, _ []syscall.Iovec, err error) {
	iov = iov[:0]
	for _, b := range vec {
		if len(b) > 0 {
			v := syscall.Iovec{Base: &b[0]}
			v.SetLen(len(b))
			iov = append(iov, v)
		}
	}
	if len(iov) == 0 {
		return 0, iov, nil
	}
	var errno syscall.Errno
	cerr := rc.Write(func(fd uintptr) bool {
		r, _, e := syscall.Syscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)))
		n, errno = int(r), e
		return true // never park: what is left goes to the writer
	})
	clear(iov) // drop the pointers into the batch
	switch {
	case cerr != nil:
		return 0, iov, cerr
	case errno == syscall.EAGAIN || errno == syscall.EINTR:
		return 0, iov, nil
	case errno != 0:
		return 0, iov, errno
	}
	return n, iov, nil
}
