package synfilter

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// MaxSources is how many sources the filter tracks at once; past it the
// least recently seen one's bucket is forgotten (an LRU hash), so a
// source seen again after that starts with a full burst.
const MaxSources = 65536

// Filter is the loaded program and its maps. Attach it to listening
// sockets; Close it when they are closed (a socket keeps the program it
// holds alive).
type Filter struct {
	mu      sync.RWMutex // Close against Attach and Dropped
	closed  bool
	prog    *ebpf.Program
	buckets *ebpf.Map
	dropped *ebpf.Map
	// The bucket's shape, for Hold.
	interval, burst uint64
}

// New loads the filter for rate SYNs a second per source, and burst at
// once. It fails without the privilege to load BPF programs (CAP_BPF or
// root) or on a kernel without the helpers used (before 4.18).
func New(rate float64, burst int) (*Filter, error) {
	if rate <= 0 || burst < 1 {
		return nil, errors.New("synfilter: rate and burst must be positive")
	}
	interval := uint64(float64(time.Second) / rate)
	if interval == 0 || interval > math.MaxInt64/uint64(burst) {
		return nil, fmt.Errorf("synfilter: rate %v with burst %d out of range", rate, burst)
	}
	buckets, err := ebpf.NewMap(&ebpf.MapSpec{
		Name: "berth_syn_bkt", Type: ebpf.LRUHash, KeySize: 16, ValueSize: 8, MaxEntries: MaxSources,
	})
	if err != nil {
		return nil, fmt.Errorf("synfilter: buckets map: %w", err)
	}
	dropped, err := ebpf.NewMap(&ebpf.MapSpec{
		Name: "berth_syn_drop", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 1,
	})
	if err != nil {
		buckets.Close()
		return nil, fmt.Errorf("synfilter: dropped map: %w", err)
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "berth_syn",
		Type:         ebpf.SocketFilter,
		Instructions: program(buckets.FD(), dropped.FD(), interval, uint64(burst)),
		License:      "Proprietary", // the helpers it calls are not GPL-only
	})
	if err != nil {
		buckets.Close()
		dropped.Close()
		return nil, fmt.Errorf("synfilter: load program: %w", err)
	}
	return &Filter{prog: prog, buckets: buckets, dropped: dropped, interval: interval, burst: uint64(burst)}, nil
}

// Attach puts the filter on a listening TCP socket. The kernel refuses
// it (EOPNOTSUPP) on a Multipath TCP socket, which Go's listeners are by
// default: listen with a net.ListenConfig whose SetMultipathTCP(false).
func (f *Filter) Attach(ln syscall.Conn) error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.closed {
		return errors.New("synfilter: attach: closed")
	}
	if err := link.AttachSocketFilter(ln, f.prog); err != nil {
		if errors.Is(err, syscall.EOPNOTSUPP) {
			return fmt.Errorf("synfilter: attach: %w (a Multipath TCP socket?)", err)
		}
		return fmt.Errorf("synfilter: attach: %w", err)
	}
	return nil
}

// Detach takes whatever filter a socket holds off it: an accepted
// connection inherits its listener's, which has nothing to do on an
// established connection.
func Detach(c syscall.Conn) error {
	return link.DetachSocketFilter(c)
}

// Hold drops every SYN of src (an IPv4 address or an IPv6 /64, as the
// program keys them) for d from now, and leaves its bucket empty after
// that: the source then gets its rate, not a fresh burst, until it has
// been quiet long enough to refill. It replaces whatever the source's
// bucket held.
func (f *Filter) Hold(src netip.Prefix, d time.Duration) error {
	key, ok := bucketKey(src)
	if !ok || d < 0 {
		return fmt.Errorf("synfilter: hold %v: not an IPv4 address or IPv6 /64", src)
	}
	var now unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &now); err != nil { // bpf_ktime_get_ns's clock
		return fmt.Errorf("synfilter: hold: %w", err)
	}
	// A SYN passes once max(tat, now) + interval - now <= burst ×
	// interval: tat = now + d + burst × interval drops every SYN for d,
	// then one an interval.
	tat := uint64(now.Nano()) + uint64(d) + f.burst*f.interval
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.closed {
		return errors.New("synfilter: hold: closed")
	}
	if err := f.buckets.Put(key, tat); err != nil {
		return fmt.Errorf("synfilter: hold %v: %w", src, err)
	}
	return nil
}

// bucketKey is the program's key for src: an IPv4 address as
// ::ffff:a.b.c.d, an IPv6 /64 as its first 8 bytes and 8 zero bytes.
func bucketKey(src netip.Prefix) ([16]byte, bool) {
	a := src.Addr()
	switch {
	case a.Is4() && src.Bits() == 32:
		return a.As16(), true // IPv4-mapped
	case a.Is6() && !a.Is4In6() && src.Bits() == 64:
		return src.Masked().Addr().As16(), true
	}
	return [16]byte{}, false
}

// Dropped is how many SYNs the filter has dropped, on every socket it is
// attached to.
func (f *Filter) Dropped() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.closed {
		return 0
	}
	var perCPU []uint64
	if err := f.dropped.Lookup(uint32(0), &perCPU); err != nil {
		return 0
	}
	var n uint64
	for _, v := range perCPU {
		n += v
	}
	return n
}

// Close releases the program and maps; sockets that hold the program
// keep it running until they close. Dropped is 0 after it.
func (f *Filter) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	f.closed = true
	return errors.Join(f.prog.Close(), f.buckets.Close(), f.dropped.Close())
}
