package gateway

import (
	"net"
	"os"
	"syscall"
)

// The relay between two plain TCP sockets (a device and its node) moves
// bytes with splice(2) through a pipe, as TCPConn.ReadFrom does, but on
// its own terms:
//
//   - Every call is non-blocking (SPLICE_F_NONBLOCK on sockets the net
//     package opened non-blocking) and made with RawSyscall. A Go
//     syscall.Syscall in a gateway whose Ps were all idle (between two
//     messages) wakes the runtime's monitor thread: a futex wake and a run
//     of 20 µs sleeps per message crossing, on cores the node and the
//     devices need at that moment. The wait for input or for room is the
//     net package's (RawConn.Read/Write parking on its poller, with the
//     connection's deadlines).
//   - A direction holds a pipe only while bytes are in it: an idle
//     connection's relay gives its pipe back to a shared pool
//     (bufPool.pipes). ReadFrom holds one pipe per direction for the
//     connection's whole life: two pipes, four descriptors, per idle
//     device.
//
// (issue 19, target 4; measured in bench/README.md, which also says why
// an in-kernel sockmap redirect was tried and not used: no backpressure,
// bytes stranded before insertion, end of stream ahead of the data, and
// no faster.)

// spliceMax is how much one splice asks to move into the pipe; the kernel
// moves at most what the pipe holds (64 KiB by default).
const spliceMax = 1 << 20

// maxPooledPipes bounds the pipes the pool keeps open.
const maxPooledPipes = 64

// pipe is a non-blocking pipe and the bytes in it.
type pipe struct {
	r, w int
	n    int
}

func newPipe() (*pipe, error) {
	var fds [2]int
	if err := syscall.Pipe2(fds[:], syscall.O_NONBLOCK|syscall.O_CLOEXEC); err != nil {
		return nil, os.NewSyscallError("pipe2", err)
	}
	return &pipe{r: fds[0], w: fds[1]}, nil
}

func (p *pipe) close() {
	_ = syscall.Close(p.r)
	_ = syscall.Close(p.w)
}

func (b *bufPool) getPipe() (*pipe, error) {
	select {
	case p := <-b.pipes:
		return p, nil
	default:
		return newPipe()
	}
}

// putPipe keeps an empty pipe for the next relay that has bytes, and
// closes one that still holds some or that the pool has no room for.
func (b *bufPool) putPipe(p *pipe) {
	if p.n != 0 {
		p.close()
		return
	}
	select {
	case b.pipes <- p:
	default:
		p.close()
	}
}

// splicer is one direction of a spliced relay. Its callbacks are bound
// once, so relaying a chunk allocates nothing.
type splicer struct {
	bufs  *bufPool
	p     *pipe // nil while idle
	n     int   // bytes the last fill moved; 0 at the end of the stream
	errno syscall.Errno
	err   error // getting a pipe failed
	inFn  func(fd uintptr) bool
	outFn func(fd uintptr) bool
}

// spliceCopy copies src to dst until src ends (nil) or either fails.
func spliceCopy(dst, src *net.TCPConn, bufs *bufPool) (int64, error) {
	rc, err := src.SyscallConn()
	if err != nil {
		return 0, err
	}
	wc, err := dst.SyscallConn()
	if err != nil {
		return 0, err
	}
	s := &splicer{bufs: bufs}
	s.inFn, s.outFn = s.fill, s.drain
	defer s.release()
	var written int64
	for {
		s.n, s.errno = 0, 0
		if err := rc.Read(s.inFn); err != nil {
			return written, err
		}
		switch {
		case s.err != nil:
			return written, s.err
		case s.errno != 0:
			return written, os.NewSyscallError("splice", s.errno)
		case s.n == 0:
			return written, nil // the end of src's stream
		}
		if err := wc.Write(s.outFn); err != nil {
			return written, err
		}
		if s.errno != 0 {
			return written, os.NewSyscallError("splice", s.errno)
		}
		written += int64(s.n)
	}
}

// fill moves what the socket holds into the pipe (empty here), taking a
// pipe first if it has none. With nothing to read it gives the pipe back
// and reports false: wait for input.
func (s *splicer) fill(fd uintptr) bool {
	if s.p == nil {
		if s.p, s.err = s.bufs.getPipe(); s.err != nil {
			return true
		}
	}
	for {
		n, _, e := syscall.RawSyscall6(syscall.SYS_SPLICE, fd, 0, uintptr(s.p.w), 0, spliceMax, spliceFlags)
		switch e {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			s.release()
			return false
		}
		s.n, s.errno = int(n), e
		if e == 0 {
			s.p.n = int(n)
		}
		return true
	}
}

// drain moves the pipe's bytes to the socket; false when the socket has
// no room for the rest: wait until it has.
func (s *splicer) drain(fd uintptr) bool {
	for s.p.n > 0 {
		n, _, e := syscall.RawSyscall6(syscall.SYS_SPLICE, uintptr(s.p.r), 0, fd, 0, uintptr(s.p.n), spliceFlags)
		switch {
		case e == 0 && n > 0:
			s.p.n -= int(n)
		case e == 0: // nothing moved from a pipe that has bytes: not a socket that takes them
			s.errno = syscall.EPIPE
			return true
		case e == syscall.EINTR:
		case e == syscall.EAGAIN:
			return false
		default:
			s.errno = e
			return true
		}
	}
	return true
}

func (s *splicer) release() {
	if s.p != nil {
		s.bufs.putPipe(s.p)
		s.p = nil
	}
}

const spliceFlags = 0x1 | 0x2 // SPLICE_F_MOVE | SPLICE_F_NONBLOCK
