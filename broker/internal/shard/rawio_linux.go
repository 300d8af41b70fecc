package shard

import (
	"syscall"
	"unsafe"
)

// rawIO does the non-blocking socket work the net package has no call
// for: a writev that never waits (inline writes) and a wait for input
// that holds no buffer (idle connections). Its callbacks are bound once,
// so a call allocates nothing.
type rawIO struct {
	rc      syscall.RawConn
	iov     []syscall.Iovec
	n       int
	errno   syscall.Errno
	writeFn func(fd uintptr) bool
	peekFn  func(fd uintptr) bool
}

func newRawIO(rc syscall.RawConn) *rawIO {
	r := &rawIO{rc: rc}
	r.writeFn = r.writev
	r.peekFn = r.peek
	return r
}

// tryWritev writes as much of vec as the socket takes at once, never
// waiting for it to become writable: n is 0, with no error, when its send
// buffer is full.
func (r *rawIO) tryWritev(vec [][]byte) (n int, err error) {
	r.iov = r.iov[:0]
	for _, b := range vec {
		if len(b) > 0 {
			v := syscall.Iovec{Base: &b[0]}
			v.SetLen(len(b))
			r.iov = append(r.iov, v)
		}
	}
	if len(r.iov) == 0 {
		return 0, nil
	}
	err = r.rc.Write(r.writeFn)
	clear(r.iov) // drop the pointers into the batch
	switch {
	case err != nil:
		return 0, err
	case r.errno == syscall.EAGAIN || r.errno == syscall.EINTR:
		return 0, nil
	case r.errno != 0:
		return 0, r.errno
	}
	return r.n, nil
}

func (r *rawIO) writev(fd uintptr) bool {
	n, _, e := syscall.Syscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&r.iov[0])), uintptr(len(r.iov)))
	r.n, r.errno = int(n), e
	return true // never park: what is left goes to the writer
}

// waitReadable blocks until the socket has input (or end of stream, or
// an error) without reading it, honouring the read deadline.
func (r *rawIO) waitReadable() error { return r.rc.Read(r.peekFn) }

func (r *rawIO) peek(fd uintptr) bool {
	var b byte
	_, _, e := syscall.Syscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b)), 1,
		syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	return e != syscall.EAGAIN // anything but "nothing yet" is for the read to report
}
