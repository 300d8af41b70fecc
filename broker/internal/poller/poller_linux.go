// Package poller wakes idle connections when their socket turns readable,
// so that a connection with nothing to read holds no goroutine: one epoll
// instance and one goroutine blocked in epoll_wait serve the whole process
// (docs/idle-connections.md).
//
// A socket is armed with EPOLLIN|EPOLLRDHUP|EPOLLONESHOT: the poller
// reports it once, then ignores it until it is armed again. Level
// triggered, so a socket that is already readable when armed is reported
// at once. The same descriptor stays in Go's own (edge-triggered) netpoll;
// a descriptor may be in several epoll sets, and Go's has no waiter for it
// while the connection is parked here. Nothing is read here: the woken
// connection reads through its net.Conn.
//
// The poller also keeps a one-second timing wheel (After): a parked
// connection's keep-alive deadline costs it 8 bytes in a slot instead of
// a runtime timer, and the wait loop ticks only while keys are filed.
//
// The wait holds no thread and no processor: the epoll descriptor is
// itself in Go's netpoll (it turns readable when events are ready), and
// the loop takes them with a non-blocking epoll_wait. A blocking
// epoll_wait would keep a P (GOMAXPROCS) in the system call until the
// runtime's monitor took it back, up to 10 ms later, during which a
// reader made runnable by its input could find no P free: with one P,
// as under taskset on one CPU, every wake of the wait loop stalled all
// connections for 10-20 ms (bench/README.md, "Latency at 1,000 msg/s").
package poller

import (
	"errors"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// stopKey is the event key of the poller's own eventfd (Close).
const stopKey = 0

// Poller is one epoll instance and the goroutine waiting on it.
type Poller struct {
	log  *slog.Logger
	epfd int
	ep   *os.File        // epfd in Go's netpoll, owning it: the wait loop's
	rc   syscall.RawConn // ep's
	evfd int             // written by Close to end the wait loop
	done chan struct{}

	mu     sync.RWMutex // closed, and epfd against Close; wakers
	closed bool
	wakers map[uint64]Waker
	next   uint64

	tmu   sync.Mutex // wheel
	wheel wheel
}

// Waker is what a key wakes, on the poller's goroutine; both calls must
// be quick (hand the work to another goroutine).
type Waker = interface { // an alias: users name the same interface without importing this package
	// Wake: the socket armed under the key turned readable, or was
	// closed by the peer, or failed.
	Wake()
	// Due: the second the key was filed under (After) has come, or a
	// revolution of the wheel has (wheelSlots seconds): the Waker checks
	// its own deadline and files the key again if it is still ahead.
	Due()
}

// Supported reports whether this system has a poller (Linux).
const Supported = true

// New starts a poller. log (nil discards) gets the wait loop's failures.
func New(log *slog.Logger) (*Poller, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	evfd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		_ = unix.Close(epfd)
		return nil, err
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN}
	setKey(&ev, stopKey)
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, evfd, &ev); err != nil {
		_ = unix.Close(epfd)
		_ = unix.Close(evfd)
		return nil, err
	}
	// Non-blocking, so that os.NewFile puts it in Go's netpoll (epoll_wait
	// itself only heeds its timeout).
	if err := unix.SetNonblock(epfd, true); err != nil {
		_ = unix.Close(epfd)
		_ = unix.Close(evfd)
		return nil, err
	}
	ep := os.NewFile(uintptr(epfd), "poller")
	rc, err := ep.SyscallConn()
	if err == nil {
		err = ep.SetReadDeadline(time.Time{}) // fails unless ep is in the netpoll
	}
	if err != nil {
		_ = ep.Close()
		_ = unix.Close(evfd)
		return nil, err
	}
	p := &Poller{log: log, epfd: epfd, ep: ep, rc: rc, evfd: evfd, done: make(chan struct{}), wakers: make(map[uint64]Waker), next: stopKey}
	go p.wait()
	return p, nil
}

// Watch registers w: its Wake is called each time a socket armed with the
// returned key turns readable (or is closed by the peer, or fails), its
// Due when a time the key was filed for (After) has come. Keys are never
// reused, so a late event for a connection that is gone wakes nobody.
func (p *Poller) Watch(wake Waker) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.next++
	p.wakers[p.next] = wake
	return p.next
}

// Unwatch forgets key; events still on their way for it are dropped.
func (p *Poller) Unwatch(key uint64) {
	p.mu.Lock()
	delete(p.wakers, key)
	p.mu.Unlock()
}

// After files key for one Due call at the first tick at or after at (the
// wheel ticks once a second, so up to a second late); keys filed for more
// than a minute ahead may come round early, once a minute, and are filed
// again by their Waker. An unwatched key is dropped when it comes round.
func (p *Poller) After(key uint64, at time.Time) {
	now := time.Now().Unix()
	sec := at.Unix()
	if at.Nanosecond() != 0 {
		sec++ // the tick at or after at
	}
	p.tmu.Lock()
	wasEmpty := p.wheel.add(key, sec, now)
	p.tmu.Unlock()
	if wasEmpty {
		p.poke() // the wait loop was waiting without a timeout
	}
}

// poke interrupts the wait loop's epoll_wait (the eventfd turns readable).
func (p *Poller) poke() {
	one := [8]byte{1}
	_, _ = unix.Write(p.evfd, one[:])
}

// ErrClosed is returned by Arm after Close.
var ErrClosed = errors.New("poller: closed")

// Arm asks for one wake-up of key when fd turns readable: added is false
// the first time fd is armed (EPOLL_CTL_ADD), true after (EPOLL_CTL_MOD).
// The caller must hold fd open for the call (syscall.RawConn.Control):
// a descriptor closed and reused meanwhile would arm another socket. A
// closed socket leaves the epoll set by itself.
func (p *Poller) Arm(fd uintptr, key uint64, added bool) error {
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLONESHOT}
	setKey(&ev, key)
	op := unix.EPOLL_CTL_ADD
	if added {
		op = unix.EPOLL_CTL_MOD
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return ErrClosed
	}
	return unix.EpollCtl(p.epfd, op, int(fd), &ev)
}

// Disarm takes fd out of the epoll set (EPOLL_CTL_DEL). Closing a socket
// does that by itself only when its last descriptor closes: a socket
// whose descriptor was duplicated (a parked connection that gave its
// net.Conn back and kept a dup) must be disarmed before the descriptor
// armed is closed, or its epoll item outlives the number, which another
// socket may then get. As for Arm, the caller holds fd open.
func (p *Poller) Disarm(fd uintptr) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return ErrClosed
	}
	return unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, int(fd), nil)
}

// Close stops the poller; sockets still armed are never woken. It is
// idempotent.
func (p *Poller) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	one := [8]byte{1}
	if _, err := unix.Write(p.evfd, one[:]); err != nil && !errors.Is(err, unix.EAGAIN) {
		return err // EAGAIN: the counter is full, the loop wakes anyway
	}
	<-p.done
	return errors.Join(p.ep.Close(), unix.Close(p.evfd))
}

// wait is the poller's goroutine. It takes what is ready with a
// non-blocking epoll_wait and, when nothing is, waits in Go's netpoll for
// the epoll descriptor to turn readable (holding no thread): without a
// deadline while the wheel is empty, else until its next tick.
func (p *Poller) wait() {
	defer close(p.done)
	events := make([]unix.EpollEvent, 256)
	wake := make([]Waker, 0, len(events))
	var due []uint64
	var n int
	var errno syscall.Errno
	take := func(fd uintptr) bool {
		for {
			r, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, fd, uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), 0, 0, 0)
			if e != syscall.EINTR {
				n, errno = int(r), e
				return n > 0 || e != 0 // none ready: wait in the netpoll
			}
		}
	}
	for {
		n, errno = 0, 0
		err := p.ep.SetReadDeadline(p.nextTick()) // unchanged, it moves no timer
		if err == nil {
			err = p.rc.Read(take)
		}
		if err == nil && errno != 0 {
			err = errno
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			n, err = 0, nil // the wheel's tick
		}
		if err != nil {
			p.log.Error("epoll_wait failed: parked connections are no longer woken", "err", err)
			return
		}
		p.mu.RLock()
		if p.closed {
			p.mu.RUnlock()
			return
		}
		for i := range n {
			key := keyOf(&events[i])
			if key == stopKey {
				var b [8]byte
				_, _ = unix.Read(p.evfd, b[:]) // a poke (After): reset the counter
				continue
			}
			if w := p.wakers[key]; w != nil {
				wake = append(wake, w)
			}
		}
		p.mu.RUnlock()
		for i, w := range wake {
			w.Wake()
			wake[i] = nil
		}
		wake = wake[:0]
		due, wake = p.tick(due, wake)
	}
}

// nextTick is the wait's deadline: the wheel's next tick, none (zero)
// while it is empty.
func (p *Poller) nextTick() time.Time {
	p.tmu.Lock()
	defer p.tmu.Unlock()
	if p.wheel.n == 0 {
		return time.Time{}
	}
	return time.Unix(p.wheel.next(), 0)
}

// tick calls Due of the keys whose second has come (due and wake are
// scratch, returned for the next tick).
func (p *Poller) tick(due []uint64, wake []Waker) ([]uint64, []Waker) {
	p.tmu.Lock()
	due = p.wheel.due(time.Now().Unix(), due[:0])
	p.tmu.Unlock()
	if len(due) == 0 {
		return due, wake
	}
	p.mu.RLock()
	for _, key := range due {
		if w := p.wakers[key]; w != nil {
			wake = append(wake, w)
		}
	}
	p.mu.RUnlock()
	for i, w := range wake {
		w.Due() // may file its key again (After)
		wake[i] = nil
	}
	return due, wake[:0]
}

// setKey stores a 64-bit key in the event's data (epoll_data_t).
func setKey(ev *unix.EpollEvent, key uint64) {
	ev.Fd = int32(uint32(key))
	ev.Pad = int32(uint32(key >> 32))
}

func keyOf(ev *unix.EpollEvent) uint64 {
	return uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
}
