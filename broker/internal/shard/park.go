package shard

import (
	"net"
	"os"
	"sync/atomic"
	"time"
	"weak"
)

// Poller wakes parked connections (broker/internal/poller): Watch
// registers a connection under a key, Arm asks for one Wake of the key
// when the descriptor turns readable, After for one Due at a time (the
// keep-alive deadline, to the second).
type Poller interface {
	Watch(w interface {
		Wake()
		Due()
	}) (key uint64) // never 0
	Unwatch(key uint64)
	Arm(fd uintptr, key uint64, added bool) error
	Disarm(fd uintptr) error
	After(key uint64, at time.Time)
}

// parkAfter is how long a reader with nothing to read waits on its own
// goroutine (Go's netpoll) before it parks: a busy connection, whose next
// packet comes within it, never pays for parking and waking, and an idle
// one gives its goroutine back this soon.
const parkAfter = 20 * time.Millisecond

// parkAfterConnect is parkAfter for a reader that has handled nothing but
// its CONNECT: long enough for a client to send its SUBSCRIBE or first
// PUBLISH on the CONNACK's heels without paying a park and a wake (and
// its socket rebuilt: +80 µs to that first answer, +65 µs of CPU per
// connection, measured with parking at once), short enough that a connect
// storm keeps few goroutines alive (rate × 2 ms: 20 at 10,000 a second).
const parkAfterConnect = 2 * time.Millisecond

// What a reader resumed from its park has handled (parking.woke).
const (
	wokeNot     uint8 = iota // not resumed, or it handled more than PINGREQs since
	wokeFresh                // resumed, nothing handled yet
	wokePings                // resumed, PINGREQs handled and nothing else
	wokeConnect              // nothing but PINGREQs handled since CONNECT
)

// The reader's states (conn.pstate).
const (
	readerRunning uint32 = iota // a goroutine runs the read loop
	readerParked                // no goroutine: whoever wins the CAS to running resumes it
)

// parking is what a connection that can park keeps for it, in the conn
// itself: its poller key (0: it cannot park), its keep-alive deadline,
// which replaces the read deadline while parked and is kept by the
// poller's wheel (one key filed at a time, no runtime timer), and
// callbacks bound once, so that parking allocates nothing. The poller is
// the shard's (Options.Poller) and the socket the writer's (w.raw).
//
// Once a reader has stored readerParked, another goroutine may resume it
// at once (an input wake-up can come as soon as the socket is armed):
// what the parking goroutine touches after that store is atomic or
// concurrency-safe.
type parking struct {
	key   uint64
	fails atomic.Uint32 // failed armings
	// filed is the Unix second the key is filed under in the poller's
	// wheel (After), 0 none: one entry at a time, moved on by Due.
	filed atomic.Uint32
	// due is when the keep alive runs out (Unix nanoseconds) while
	// parked; 0 none.
	due     atomic.Int64
	added   atomic.Bool // the socket (or its dup, detached) is in the poller's epoll set
	expired bool        // set by the keep-alive wake-up for the resumed loop
	// woke is wokeFresh once the reader resumes from its park, wokePings
	// once it has handled PINGREQs and nothing else since (idle);
	// wokeConnect from CONNECT until it handles anything else;
	// reader-owned. A reader parking at wokePings or wokeConnect parks
	// without its net.Conn (detach.go).
	woke uint8
	// detached: the reader parked without its socket and has not rebuilt
	// its packet reader's source since (reattach); reader-owned.
	detached bool
	// waitUntil is the read deadline idle set for its wait (Unix
	// nanoseconds), still on the socket; 0 when it is another (the keep
	// alive's, none, a new net.Conn's). Reader-owned.
	waitUntil int64
	// ident is the bare socket handed to Serve, once it was detached: End
	// finds the connection by it. Guarded like c.nc (detach.go).
	ident weak.Pointer[net.TCPConn]
	armFn func(fd uintptr)
}

// canPark sets up parking for a connection handed to Serve: only a plain
// socket (TCP, Unix, under a PROXY protocol wrapper too), whose readable
// bytes are its next packet's; TLS and WebSocket connections hold
// decrypted or unframed input of their own and keep their goroutine.
func (c *conn) canPark(p Poller) {
	if p == nil || c.w.raw == nil {
		return
	}
	k := &c.park
	c.bindParking()
	k.woke = wokeConnect
	k.key = p.Watch(c)
}

// bindParking binds the callbacks an attached parking connection's socket
// calls take (16 B each): the arming, and sockReader's readWaits. A
// connection parked without its net.Conn has no socket to call them on
// and drops them (detachLocked); attachLocked binds them again.
func (c *conn) bindParking() {
	c.park.armFn = c.arm
	c.w.raw.waits = c.readWaits
}

// parks reports whether the connection parks while idle (canPark).
func (c *conn) parks() bool { return c.park.key != 0 }

// idle waits for the client's next packet holding no buffer or scratch.
// A connection that can park waits at most parkAfter on its goroutine and
// then reports park: it holds no buffer and its loop should park. Else it
// takes a buffer fit for what came (takeInputBuf: none for the end of
// the stream) and reports the wait's error (the read deadline, a closed
// socket, the end of the stream), which ends the loop.
//
// A reader woken from its park that has handled nothing but PINGREQs
// (park.woke) parks again at once: a device that pings now and then
// is not busy, and waiting parkAfter on a goroutine is what a fleet
// pinging at once would pay for with thousands of stacks. A reader that
// has handled nothing but its CONNECT (and PINGREQs) waits only
// parkAfterConnect: a connect storm would otherwise keep rate × parkAfter
// goroutines alive, whose stacks the runtime keeps after they end
// (docs/idle-connections.md, "Parked soon after CONNECT"); and in a storm
// none (handshakes.afterConnect).
//
// A busy reader waits as idleBusy says.
func (c *conn) idle(start time.Time) (park bool, err error) {
	if c.parks() && c.park.woke == wokeNot {
		return c.idleBusy(start)
	}
	c.releaseInput()
	if !c.parks() {
		if err = c.w.raw.waitReadable(); err != nil {
			c.takeReadBuf()
			return false, err
		}
		return false, c.takeInputBuf()
	}
	wait := parkAfter
	switch c.park.woke {
	case wokePings:
		wait = 0 // a deadline already passed: park unless input is there (parkReader's arming sees it then)
	case wokeConnect:
		wait = c.shard.hs.afterConnect() // 0 in a connect storm
	}
	c.shard.opts.probe.wait(wait)
	c.waitDeadline(start, wait)
	err = c.waitInput(wait)
	if os.IsTimeout(err) && !c.kicked.Load() {
		c.park.waitUntil = 0 // resumed, it may read a new net.Conn (detach.go)
		return true, nil
	}
	if err != nil {
		c.takeReadBuf()
		return false, err
	}
	// The wait's deadline stays for the packet that came: the keep
	// alive's replaces it only if its read must wait (readWaits).
	return false, c.takeInputBuf()
}

// idleBusy is idle for a busy reader, one that handled more than
// PINGREQs since it last woke (park.woke wokeNot): it waits at most
// parkAfter, as every reader that can park does, holding its read buffer
// and scratch, and reads what comes straight into that buffer
// (rawIO.waitInto), which the packet reader then parses where it landed:
// a packet that comes alone costs one read, with no peek before it. When
// the wait runs out it gives both back and reports park.
func (c *conn) idleBusy(start time.Time) (park bool, err error) {
	c.noteWaiting()
	buf := c.rd.Release()
	if len(buf) < readBufSize {
		// The small buffer of a reader woken for small packets
		// (wakeinput.go), or none: a busy one reads into a whole one.
		c.takeReadBuf()
		buf = c.rd.Release()
	}
	c.shard.poison(buf) // tests: nothing may still point into what it read before
	c.shard.opts.probe.wait(parkAfter)
	c.waitDeadline(start, parkAfter)
	err = c.w.raw.waitInto(buf)
	c.rd.Use(buf)
	switch {
	case os.IsTimeout(err) && !c.kicked.Load():
		c.park.waitUntil = 0 // resumed, it may read a new net.Conn (detach.go)
		c.releaseInput()     // a parked reader holds no buffer
		return true, nil
	case err != nil:
		return false, err
	case c.w.raw.input == inputEnd:
		return false, c.inputEnd()
	}
	// The wait's deadline stays for the packet that came: the keep
	// alive's replaces it only if its read must wait (readWaits).
	return false, nil
}

// waitDeadline sets the deadline of a wait for input that may park, which
// starts at start and lasts wait (parkAfter, or 0 to park at once unless
// input is there). The deadline moves only when it would come before
// start+wait, and then to start+2×wait: a busy connection moves it once
// per parkAfter, not once per packet (every move of a runtime timer may
// wake a second thread: the runtime's wakeNetPoller, a futex wake and a
// spinning M), and parks parkAfter to 2×parkAfter after its last packet.
func (c *conn) waitDeadline(start time.Time, wait time.Duration) {
	if until := start.Add(wait).UnixNano(); wait == 0 || c.park.waitUntil < until {
		dl := start.Add(2 * wait)
		_ = c.nc.SetReadDeadline(dl)
		c.park.waitUntil = dl.UnixNano()
	}
}

// readWaits is called before a read that waits on the socket for the rest
// of a packet (sockReader): the deadline of idle's wait, if still set,
// gives way to the keep alive's [MQTT-3.1.2-22] (3.1.1: [MQTT-3.1.2-24]),
// counted from now, as input came within the wait.
func (c *conn) readWaits() {
	if c.park.waitUntil == 0 {
		return
	}
	c.park.waitUntil = 0
	c.setReadDeadline(time.Now())
	if c.kicked.Load() {
		_ = c.nc.SetReadDeadline(time.Now()) // kick's, which that may have undone
	}
}

// setReadDeadline sets the keep-alive read deadline [MQTT-3.1.2-22]
// (3.1.1: [MQTT-3.1.2-24]) counted from start, or none.
func (c *conn) setReadDeadline(start time.Time) {
	if c.keepAlive() > 0 {
		_ = c.nc.SetReadDeadline(start.Add(c.keepAlive()))
	} else {
		_ = c.nc.SetReadDeadline(time.Time{})
	}
}

// parkReader parks the reader, holding no buffer, after idle said so: it
// reports true when the loop must return (its goroutine ends; a wake-up
// resumes it on another), false when it must go on reading, having taken
// its buffer back (kicked meanwhile, or the socket could not be armed).
func (c *conn) parkReader(start time.Time) bool {
	k := &c.park
	if c.keepAlive() > 0 {
		k.due.Store(start.Add(c.keepAlive()).UnixNano())
	}
	fails := k.fails.Load()
	// Only tried: a writer may hold c.w.mu across a blocking write to a
	// client that does not read (until WriteTimeout), and a connection
	// with a writer keeps its net.Conn anyway (detachLocked). Waiting
	// would stop the reader, and with it the bound on what that client
	// leaves unread (ctrlFull), for as long.
	if (k.woke == wokePings || k.woke == wokeConnect) && c.w.mu.TryLock() {
		if c.detachLocked() {
			k.detached = true
			c.rd.Reset(nil) // its source holds the net.Conn just closed
			return c.parkDetachedLocked(fails)
		}
		c.w.mu.Unlock()
	}
	c.pstate.Store(readerParked)
	if c.keepAlive() > 0 {
		c.fileKeepAlive() // after the store: a Due that saw the reader running unfiled it (Due)
	}
	if c.kicked.Load() {
		// kick may have seen the reader running: whoever moves it back
		// runs it.
		return !c.unpark()
	}
	// From here the connection may run on another goroutine.
	if err := c.w.raw.rc.Control(k.armFn); err != nil || k.fails.Load() != fails {
		// A closed socket, which the read reports. (A failure counted by
		// a later park of a resumed reader only makes this try the CAS.)
		return !c.unpark()
	}
	return true
}

// parkDetachedLocked is parkReader's end for a reader that parks without
// its socket (detachLocked): it arms the dup, held open by c.w.mu, which
// it unlocks, so that an attach (which closes the dup) cannot come
// between.
func (c *conn) parkDetachedLocked(fails uint32) bool {
	k := &c.park
	c.pstate.Store(readerParked)
	if c.keepAlive() > 0 {
		c.fileKeepAlive()
	}
	if c.kicked.Load() {
		c.w.mu.Unlock()
		return !c.unpark()
	}
	if err := c.shard.opts.Poller.Arm(uintptr(c.w.raw.fd), k.key, k.added.Swap(true)); err != nil {
		k.added.Store(false)
		k.fails.Add(1)
	}
	c.w.mu.Unlock()
	// From here the connection may run on another goroutine.
	if k.fails.Load() != fails {
		return !c.unpark()
	}
	return true
}

// unpark takes a parked reader back on the calling goroutine: false when
// another goroutine already resumed it. The reader holds its buffer again
// and its socket (reattach).
func (c *conn) unpark() bool {
	if !c.pstate.CompareAndSwap(readerParked, readerRunning) {
		return false
	}
	c.reattach()
	c.takeReadBuf()
	return true
}

func (c *conn) arm(fd uintptr) {
	k := &c.park
	if err := c.shard.opts.Poller.Arm(fd, k.key, k.added.Swap(true)); err != nil {
		k.added.Store(false) // EPOLL_CTL_ADD again next time
		k.fails.Add(1)
	}
}

// wakeParked resumes a parked reader on a new goroutine; it reports
// whether it did (the reader was parked and nobody else won it).
func (c *conn) wakeParked() bool {
	// Only a connection that can park is ever parked: c.park is set
	// before the first park, and read after the CAS.
	if !c.pstate.CompareAndSwap(readerParked, readerRunning) {
		return false
	}
	go c.resume() // a closure per wake-up of a parked reader
	return true
}

// Wake is the poller's wake-up: the socket has input, an end of stream
// or an error.
func (c *conn) Wake() { c.wakeParked() }

// fileKeepAlive files the connection's key in the poller's wheel for its
// keep-alive deadline, unless it is filed already: the deadline only moves
// later, so an earlier entry comes round first and Due files it again.
func (c *conn) fileKeepAlive() {
	k := &c.park
	due := time.Unix(0, k.due.Load())
	if k.filed.CompareAndSwap(0, uint32(due.Unix())) {
		c.shard.opts.Poller.After(k.key, due)
	}
}

// Due is the poller's keep-alive tick for the connection's key
// (fileKeepAlive): a parked reader whose deadline passed is resumed to
// fail with it (0x8D, [MQTT-3.1.2-22]; 3.1.1: closed, [MQTT-3.1.2-24]);
// one parked since with a later deadline is filed again; a running one
// is left to its read deadline, and its next park files it again.
func (c *conn) Due() {
	k := &c.park
	k.filed.Store(0) // the entry that came round is gone
	if c.pstate.Load() != readerParked {
		// A reader parking from now on sees filed 0 and files itself
		// (parkReader stores parked before it files).
		return
	}
	due := k.due.Load()
	if due == 0 {
		return
	}
	if time.Now().UnixNano() < due {
		c.fileKeepAlive()
		return
	}
	if c.pstate.CompareAndSwap(readerParked, readerRunning) {
		k.expired = true // before the go statement: the resumed loop sees it
		go c.resume()
	}
}

// resume runs a woken reader: it goes on with the read loop where it
// parked, which peeks at what woke it before it takes a buffer for it
// (idle, wakeinput.go).
func (c *conn) resume() {
	p := c.shard.opts.probe
	p.reader(1)
	c.reattach() // a socket parked without its net.Conn gets one
	c.park.woke = wokeFresh
	c.loop()
	p.reader(-1)
}

// unwatch ends the connection's parking at its end: no wake-up reaches
// it any more. Its socket leaves the epoll set when it is closed.
func (c *conn) unwatch() {
	k := &c.park
	if k.key == 0 {
		return
	}
	c.shard.opts.Poller.Unwatch(k.key) // an entry still filed is dropped when it comes round
}
