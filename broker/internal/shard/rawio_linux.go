package shard

import (
	"io"
	"net"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// rawIO does the non-blocking socket work the net package has no call
// for: a writev that never waits (inline writes), a wait for input that
// holds no buffer (idle connections) and a read of the bytes that are
// there (sockReader). Its callbacks are bound once, so a call allocates
// nothing.
//
// These calls never block (MSG_DONTWAIT, and the net package's sockets
// are non-blocking), so they are made with RawSyscall, outside the
// runtime's syscall bookkeeping: a Go syscall.Syscall on a process whose
// Ps were all idle wakes the runtime's monitor thread (sysmon: a futex
// wake, then a run of 20 µs sleeps), and the first syscall after a
// reader wakes for a packet is exactly that. Handling a lone PUBLISH
// (a busy reader's read, waitInto; or a peek and a read; then the writev
// to the subscriber) thus costs no futex and no extra thread on the way
// (issue 19, target 3: measured in bench/README.md).
//
// While its connection is parked without its net.Conn (detach.go), rc is
// nil and fd the duplicated descriptor that keeps the socket open: only
// tryWritev works then, on fd, under the connection's write lock (which
// also guards fd's close). rc nil and fd -1: the socket could not be
// rebuilt, and every call fails as on a closed socket.
//
// The counts and errnos are 32 bits wide (a socket call moves less than
// 2 GiB, an errno fits), so that a rawIO is 128 B, its size class, not
// 144 (TestConnStateSize): every held connection keeps one.
type rawIO struct {
	rc    syscall.RawConn
	iov   []syscall.Iovec // tryWritev's, kept while attached; nil once detached (detachedIovs)
	n     int32
	errno uint32 // a syscall.Errno
	// The reader's, apart from the writers' n and errno (writes are
	// under the connection's write lock, reads on its reader alone).
	// rbuf is tryRead's destination during the call; between calls,
	// rbuf[:rn] are the bytes waitInto read, which sockReader's next Read
	// returns first (rn 0: none).
	rbuf     []byte
	rn       int32
	rerrno   uint32        // a syscall.Errno
	inputErr syscall.Errno // waitReadable's: the error it peeked, 0 end of stream
	input    inputKind     // what waitReadable found waiting
	fd       int32         // the parked socket's duplicated descriptor while rc is nil; -1 none
	writeFn  func(fd uintptr) bool
	peekFn   func(fd uintptr) bool
	readFn   func(fd uintptr) bool // tryRead's and waitInto's
	// waits, if set, is called before sockReader's read waits on the
	// socket (conn.readWaits); reader-owned.
	waits func()
}

func newRawIO(rc syscall.RawConn) *rawIO {
	r := &rawIO{rc: rc, fd: -1}
	r.bind()
	return r
}

// bind binds the callbacks rc's calls take (16 B each). A connection
// parked without its net.Conn (detach.go) has no rc and drops them
// (unbind): tryWritev writes to the dup directly. Called with rc's
// guards held (the connection's write lock and its session's lock).
func (r *rawIO) bind() {
	r.writeFn = r.writev
	r.peekFn = r.peek
	r.readFn = r.read
}

func (r *rawIO) unbind() {
	r.writeFn, r.peekFn, r.readFn = nil, nil, nil
	r.iov = nil // tryWritev uses one on its stack while detached
}

// hasCallbacks reports whether the callbacks are bound, sockReader's
// waits included, or an iovec kept (tests).
func (r *rawIO) hasCallbacks() bool {
	return r.writeFn != nil || r.peekFn != nil || r.readFn != nil || r.waits != nil || r.iov != nil
}

// tryWritev writes as much of vec as the socket takes at once, never
// waiting for it to become writable: n is 0, with no error, when its send
// buffer is full.
func (r *rawIO) tryWritev(vec [][]byte) (n int, err error) {
	if r.rc == nil && r.fd >= 0 && len(vec) <= detachedIovs {
		// Parked without its net.Conn: the dup, held open by the write
		// lock, and an iovec on the stack, as a detached rawIO keeps none.
		var a [detachedIovs]syscall.Iovec
		r.writevDetached(appendIovs(a[:0], vec))
	} else {
		r.iov = appendIovs(r.iov[:0], vec)
		if len(r.iov) == 0 {
			return 0, nil
		}
		switch {
		case r.rc != nil:
			err = r.rc.Write(r.writeFn)
		case r.fd >= 0:
			r.writev(uintptr(r.fd)) // the dup, as above, for a longer vector
		default:
			err = net.ErrClosed
		}
		clear(r.iov) // drop the pointers into the batch
	}
	switch e := syscall.Errno(r.errno); {
	case err != nil:
		return 0, err
	case e == syscall.EAGAIN || e == syscall.EINTR:
		return 0, nil
	case e != 0:
		return 0, e
	}
	return int(r.n), nil
}

// detachedIovs is how many buffers a detached connection's tryWritev
// writes from an iovec on its stack: an inline write is a control packet
// or a few deliveries, each a header and a payload.
const detachedIovs = 8

// appendIovs appends an iovec for each non-empty buffer of vec.
func appendIovs(iov []syscall.Iovec, vec [][]byte) []syscall.Iovec {
	for _, b := range vec {
		if len(b) > 0 {
			v := syscall.Iovec{Base: &b[0]}
			v.SetLen(len(b))
			iov = append(iov, v)
		}
	}
	return iov
}

func (r *rawIO) writev(fd uintptr) bool {
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&r.iov[0])), uintptr(len(r.iov)))
	r.n, r.errno = int32(n), uint32(e)
	return true // never park: what is left goes to the writer
}

// writevDetached is writev on the dup of a detached connection (r.fd),
// from iov, which lives on the caller's stack.
func (r *rawIO) writevDetached(iov []syscall.Iovec) {
	r.n, r.errno = 0, 0
	if len(iov) == 0 {
		return
	}
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITEV, uintptr(r.fd), uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)))
	r.n, r.errno = int32(n), uint32(e)
}

// waitReadable blocks until the socket has input (or end of stream, or
// an error) without reading it, honouring the read deadline. It then
// says what waits (r.input): the end of the stream or an error, a few
// small whole packets, or more.
func (r *rawIO) waitReadable() error {
	if r.rc == nil {
		return net.ErrClosed // its socket could not be rebuilt (detach.go)
	}
	return r.rc.Read(r.peekFn)
}

func (r *rawIO) peek(fd uintptr) bool {
	var b [smallReadBufSize]byte // on the stack: the peek allocates nothing
	n, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)),
		syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	switch {
	case e == syscall.EAGAIN:
		return false // nothing yet: wait in the netpoller
	case e == syscall.EINTR:
		r.input = inputMore // the read sorts it out
	case e != 0:
		r.input, r.inputErr = inputEnd, e // a reset: the read would fail too
	case n == 0:
		r.input, r.inputErr = inputEnd, 0 // end of stream
	default:
		r.input = classifyInput(b[:n], int(n) < len(b))
	}
	return true
}

// waitInto is waitReadable for a busy reader (conn.idleBusy): it reads
// what comes into p, the reader's buffer, instead of peeking at it, so a
// packet that comes alone costs one read and no peek, and keeps the bytes
// for sockReader's next Read, which returns them where they are. It sets
// r.input: inputEnd for the end of the stream or a reset, else inputMore.
func (r *rawIO) waitInto(p []byte) error {
	if r.rc == nil {
		return net.ErrClosed
	}
	r.rbuf, r.rn = p, 0
	r.input = inputWait
	if err := r.rc.Read(r.readFn); err != nil {
		r.rbuf, r.rn, r.input = nil, 0, inputMore // tryRead's calls never wait
		return err
	}
	switch n, e := r.rn, syscall.Errno(r.rerrno); {
	case e == syscall.EINTR:
		// Nothing read: the ordinary read sorts it out.
	case e != 0:
		r.input, r.inputErr = inputEnd, e // a reset: the read would fail too
	case n == 0:
		r.input, r.inputErr = inputEnd, 0 // end of stream
	default:
		return nil // rbuf[:rn] kept for the next Read
	}
	r.rbuf, r.rn = nil, 0
	return nil
}

// dropRead forgets the bytes waitInto read and no Read has taken: the
// buffer they are in goes back (conn.releaseReadBuf), the connection ends.
func (r *rawIO) dropRead() { r.rbuf, r.rn = nil, 0 }

// tryRead reads what the socket holds into p without waiting: 0 when it
// holds nothing, and also at the end of the stream or on an error, which
// the caller's ordinary read then reports as the net package does.
func (r *rawIO) tryRead(p []byte) int {
	if len(p) == 0 || r.rc == nil {
		return 0
	}
	r.rbuf = p
	err := r.rc.Read(r.readFn)
	n := r.rn
	r.rbuf, r.rn = nil, 0
	if err != nil || r.rerrno != 0 {
		return 0
	}
	return int(n)
}

// read is tryRead's and waitInto's call: tryRead's never parks (an empty
// socket is left to nc.Read), waitInto's waits in the netpoller while
// the socket is empty.
func (r *rawIO) read(fd uintptr) bool {
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&r.rbuf[0])), uintptr(len(r.rbuf)))
	if e == syscall.EAGAIN && r.input == inputWait {
		return false
	}
	r.rn, r.rerrno = int32(n), uint32(e)
	if r.input == inputWait {
		r.input = inputMore // done waiting; waitInto classifies what came
	}
	return true
}

// reader is what the connection's packet reader reads: nc, through a
// sockReader when r reaches its socket (nil: nc itself). Only a socket
// whose readable bytes are nc's (a plain one, or under a wrapper that
// passes reads through, as the node's PROXY protocol conn does once its
// header is read) has a rawIO, as for waitReadable.
func (r *rawIO) reader(nc net.Conn) io.Reader {
	if r == nil {
		return nc
	}
	return &sockReader{raw: r, nc: nc}
}

// sockReader reads the socket without waiting first, with RawSyscall
// (rawIO), and only when that finds nothing there (or the end of the
// stream, or an error) reads nc as usual: the read deadline, the wait for
// input and the errors stay the net package's.
type sockReader struct {
	raw *rawIO
	nc  net.Conn
}

func (s *sockReader) Read(p []byte) (int, error) {
	if r := s.raw; r.rn > 0 {
		// What waitInto read, into p itself when p is the buffer it read
		// into (conn.idleBusy: the copy is then no copy).
		n := copy(p, r.rbuf[:r.rn])
		if r.rbuf, r.rn = r.rbuf[n:], r.rn-int32(n); r.rn == 0 {
			r.rbuf = nil
		}
		return n, nil
	}
	if n := s.raw.tryRead(p); n > 0 {
		return n, nil
	}
	if s.raw.waits != nil {
		s.raw.waits()
	}
	return s.nc.Read(p)
}

// What a new connection's socket holds before its handshake
// (rawIO.connectInput, handshakes.go).
const (
	connectNone    uint8 = iota // nothing yet: wait for it in the poller
	connectWhole                // a whole first packet, the end of the stream or an error: the handshake does not wait
	connectPartial              // part of a packet: the handshake may wait for the rest
)

// connectInput says what a new connection's socket holds, without
// waiting: it peeks at the first packet's fixed header and asks the
// socket how many bytes it holds (SIOCINQ).
func (r *rawIO) connectInput() uint8 {
	kind := connectWhole // a closed socket: the handshake's read fails at once
	if r.rc != nil {
		_ = r.rc.Control(func(fd uintptr) { kind = peekConnect(fd) })
	}
	return kind
}

func peekConnect(fd uintptr) uint8 {
	var b [5]byte // a fixed header: type, then a remaining length of 1 to 4 bytes
	n, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)),
		syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	switch {
	case e == syscall.EAGAIN:
		return connectNone
	case e == syscall.EINTR:
		return connectPartial // the read sorts it out
	case e != 0, n == 0:
		return connectWhole // a reset or the end of the stream: the read fails at once
	}
	size, ok := packetSize(b[:n])
	if !ok {
		return connectPartial
	}
	var avail int32
	if _, _, e := syscall.RawSyscall(syscall.SYS_IOCTL, fd, unix.SIOCINQ, uintptr(unsafe.Pointer(&avail))); e != 0 {
		return connectPartial
	}
	if int(avail) < size {
		return connectPartial
	}
	return connectWhole
}

// packetSize is the size of the packet whose fixed header starts b: ok
// false when b holds too little of it to say. A malformed remaining
// length says 0: the read fails at once.
func packetSize(b []byte) (size int, ok bool) {
	v := 0
	for i := 1; i < len(b); i++ {
		v |= int(b[i]&0x7f) << (7 * (i - 1))
		if b[i]&0x80 == 0 {
			return 1 + i + v, true
		}
	}
	if len(b) == 5 {
		return 0, true // four bytes of length all continued: malformed
	}
	return 0, false
}

// shutSocket ends a connection still in its handshake (Shutdown): a
// plain socket is shut down, not closed, so that a connection parked in
// the poller before its CONNECT is woken (its socket reads the end of the
// stream) and ends on its own; any other is closed.
func (c *conn) shutSocket() {
	if r := c.w.raw; r != nil && r.rc != nil {
		if r.rc.Control(func(fd uintptr) { _ = syscall.Shutdown(int(fd), syscall.SHUT_RDWR) }) == nil {
			return
		}
	}
	_ = c.nc.Close()
}
