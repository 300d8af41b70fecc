package shard

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// A connection handed to Serve that can park (a plain socket, a Poller)
// holds no goroutine before its CONNECT either, only a few run their
// handshake at once, and Serve waits on nothing the peer does, so the
// listener calls it on its accepting goroutine (listener.Server.Inline;
// docs/idle-connections.md, "Handshakes bounded"):
//
//   - Serve queues the connection for one of at most max workers, which
//     take queued connections one after another and end when the queue
//     is empty.
//   - The worker peeks at the socket (rawIO.connectInput). Nothing there
//     yet: the connection parks in the poller (preConnect); the
//     CONNECT's arrival, the peer's close or the connect timeout (filed
//     in the poller's wheel) queues it again.
//   - A whole CONNECT there: the worker runs the handshake.
//   - Part of one (a slow client): its handshake waits for the rest on a
//     goroutine of its own, as every connection's did before, under the
//     read deadline of the connect timeout.
//
// A worker that has handled a CONNECT parks the connection's reader
// itself, at once, while others wait in the queue (parkNow), and else runs
// its read loop (leave), whose first wait, for the packet after the
// CONNECT, lasts parkAfterConnect, or nothing in a storm (afterConnect).
type handshakes struct {
	mu    sync.Mutex
	queue []*preConnect // waiting for a worker, oldest first
	busy  int           // workers running
	max   int
	// queued is len(queue), stored under mu, read without it
	// (afterConnect).
	queued atomic.Int32
	// waiting counts the readers in their parkAfterConnect wait.
	waiting atomic.Int32
}

// defaultHandshakes is the number of handshake workers per
// processor when Options.handshakes is 0: a handshake waits on nothing
// but the shard's locks and, for a persistent session, its store.
const defaultHandshakes = 4

func (h *handshakes) init(n int) {
	if n <= 0 {
		n = defaultHandshakes * runtime.GOMAXPROCS(0)
	}
	h.max = n
}

// enqueue queues pc for a worker, starting one if a slot is free.
func (h *handshakes) enqueue(s *Shard, pc *preConnect) {
	h.mu.Lock()
	h.queue = append(h.queue, pc)
	h.queued.Store(int32(len(h.queue)))
	spawn := h.busy < h.max
	if spawn {
		h.busy++
	}
	h.mu.Unlock()
	if spawn {
		go s.handshakeWorker()
	}
}

// next takes the oldest queued connection, or gives the worker's slot
// back when none waits (nil).
func (h *handshakes) next() *preConnect {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.queue) == 0 {
		h.queue = nil // a storm's queue is not kept
		h.busy--
		return nil
	}
	pc := h.queue[0]
	h.queue[0] = nil
	h.queue = h.queue[1:]
	h.queued.Store(int32(len(h.queue)))
	return pc
}

// handshakeWorker runs queued handshakes until the queue is empty.
func (s *Shard) handshakeWorker() {
	for pc := s.hs.next(); pc != nil; pc = s.hs.next() {
		if pc.run() {
			return // it became the connection's reader
		}
	}
}

// leave gives back a worker's slot if no connection waits in the queue:
// the worker then runs the read loop of the connection it has just
// handled itself, and a client that connects alone costs one goroutine,
// as before the workers.
func (h *handshakes) leave() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.queue) > 0 {
		return false
	}
	h.queue = nil
	h.busy--
	return true
}

// afterConnect is how long a reader that has handled nothing but its
// CONNECT waits on its goroutine for the next packet before it parks
// (idle): parkAfterConnect, so that a client subscribing on the CONNACK's
// heels pays no park and wake-up; but 0 in a connect storm, while
// handshakes wait in the queue or max readers are in that wait already:
// it parks at once (a packet already there wakes it at once), so a storm
// keeps no goroutine per connection alive for the wait, whose stacks the
// runtime would keep after they end (docs/idle-connections.md, "Parked at
// once in a storm"). A reader given parkAfterConnect ends it in waitInput.
func (h *handshakes) afterConnect() time.Duration {
	if h.queued.Load() > 0 {
		return 0
	}
	if h.waiting.Add(1) > int32(h.max) {
		h.waiting.Add(-1)
		return 0
	}
	return parkAfterConnect
}

// waitInput is idle's wait for input, and ends a wait afterConnect gave
// (counted by the probe).
func (c *conn) waitInput(wait time.Duration) error {
	if c.park.woke != wokeConnect || wait == 0 {
		return c.w.raw.waitReadable()
	}
	p := c.shard.opts.probe
	p.connectWait(1)
	err := c.w.raw.waitReadable()
	p.connectWait(-1)
	c.shard.hs.waiting.Add(-1)
	return err
}

// preConnect is a connection handed to Serve that has not had its
// handshake: parked in the poller until its CONNECT comes, or queued for
// a worker. It keeps what the handshake needs, the ConnInfo handed to
// Serve, and is dropped once the handshake starts.
type preConnect struct {
	c        *conn
	info     ConnInfo
	key      uint64        // its poller key while parked; 0 none yet
	state    atomic.Uint32 // readerRunning, or readerParked: whoever wins the CAS to running queues it
	deadline time.Time     // the connect timeout
	expired  bool          // set by Due before it queues pc: the connect timeout ran out
	added    bool          // the socket is in the poller's epoll set
}

// park waits for input on pc's socket in the poller, or for its connect
// timeout. Once it stores readerParked another goroutine may take pc.
func (pc *preConnect) park() {
	c := pc.c
	p := c.shard.opts.Poller
	if pc.key == 0 {
		pc.key = p.Watch(pc)
	}
	if pc.deadline.IsZero() {
		pc.deadline = time.Now().Add(c.shard.opts.ConnectTimeout) // queued whole, then found empty: not expected
	}
	p.After(pc.key, pc.deadline) // a spurious wake-up files it again: Due is idempotent
	added := pc.added
	pc.added = true // if the arming fails, the read that follows fails too, or a later Arm repairs it
	pc.state.Store(readerParked)
	var armErr error
	err := c.w.raw.rc.Control(func(fd uintptr) { armErr = p.Arm(fd, pc.key, added) })
	if err == nil && armErr == nil {
		return // from here pc may run on another goroutine
	}
	if pc.state.CompareAndSwap(readerParked, readerRunning) {
		// A closed socket, or a poller that failed: the handshake finds
		// out, reading.
		p.Unwatch(pc.key)
		go c.shard.handshakeNow(c, &pc.info, p) // its read waits, under the connect timeout
	}
}

// Wake is the poller's: the socket has input, an end of stream or an
// error.
func (pc *preConnect) Wake() {
	if pc.state.CompareAndSwap(readerParked, readerRunning) {
		pc.c.shard.hs.enqueue(pc.c.shard, pc)
	}
}

// Due is the poller's: the connect timeout may have run out.
func (pc *preConnect) Due() {
	if pc.state.Load() != readerParked {
		return // running: a park files it again
	}
	if time.Now().Before(pc.deadline) {
		pc.c.shard.opts.Poller.After(pc.key, pc.deadline) // the wheel came round early
		return
	}
	if pc.state.CompareAndSwap(readerParked, readerRunning) {
		pc.expired = true // before enqueue: the worker sees it
		pc.c.shard.hs.enqueue(pc.c.shard, pc)
	}
}

// run is a worker's: the handshake of a woken or queued connection. It
// reports whether the worker left the workers to run the connection's
// read loop (leave).
func (pc *preConnect) run() (left bool) {
	c := pc.c
	s := c.shard
	if pc.expired {
		// Silence until the connect timeout: just close.
		s.opts.Poller.Unwatch(pc.key)
		c.end()
		return false
	}
	kind := c.w.raw.connectInput()
	if kind == connectNone {
		pc.park() // queued before its CONNECT came, or woken for nothing
		return false
	}
	if pc.key != 0 {
		s.opts.Poller.Unwatch(pc.key)
	}
	if pc.added {
		c.park.added.Store(true) // its parks MOD the socket's item (parkReader)
	}
	if kind == connectPartial {
		// A slow client: its handshake waits for the rest of the CONNECT
		// on a goroutine of its own, not on a worker.
		go s.handshakeNow(c, &pc.info, s.opts.Poller)
		return false
	}
	c.rd.Use(s.getReadBuf()[:])
	s.opts.probe.handshake(1)
	present, ok := c.handshake(&pc.info)
	s.opts.probe.handshake(-1)
	if !ok {
		c.end() // nobody waits for a connection without a session
		return false
	}
	s.connected(c, &pc.info, present, s.opts.Poller)
	if s.hs.leave() {
		c.loop()
		return true
	}
	// A storm: others wait in the queue. The reader parks at once, here.
	if !c.parkNow() {
		go c.loop()
	}
	return false
}

// parkNow parks, on a handshake worker in a storm, the reader of a
// connection that has just had its handshake, with no wait and no
// goroutine of its own: what its read loop would do first (readPackets,
// idle with a wait of none), so that a storm starts no goroutine per
// connection (a go statement per handshake ran ahead of two busy cores:
// over a hundred started goroutines, each with its stack, waited to run).
// It reports false, the reader running on the caller, when the loop must
// run instead: bytes that came with the CONNECT, a kick, or a socket that
// could not be armed; and true also when a wake-up has resumed it
// elsewhere already.
func (c *conn) parkNow() bool {
	if c.rd.Buffered() > 0 || c.kicked.Load() {
		return false
	}
	start := time.Now()
	c.flushBeforeWait()
	if c.in != nil {
		c.in.slab.release()
	}
	c.releaseInput()
	c.park.waitUntil = 0 // the handshake's deadline is no wait's
	if !c.parkReader(start) {
		return false
	}
	c.shard.opts.probe.parkedNow()
	return true
}

// handshakeNow runs c's handshake and then its read loop on the calling
// goroutine, outside the shard's bound: ServeConn's, TLS and WebSocket
// connections, and a slow client's, whose CONNECT came in pieces. p
// parks it while idle, if not nil.
func (s *Shard) handshakeNow(c *conn, info *ConnInfo, p Poller) {
	c.rd.Use(s.getReadBuf()[:])
	present, ok := c.handshake(info)
	s.afterHandshake(c, info, present, ok, p)
}

// afterHandshake runs the read loop of a connection whose handshake
// succeeded (ok), on the calling goroutine, or ends it.
func (s *Shard) afterHandshake(c *conn, info *ConnInfo, present, ok bool, p Poller) {
	if !ok {
		c.end() // nobody waits for a connection without a session
		return
	}
	s.connected(c, info, present, p)
	c.loop()
}

// connected sets a connection up after its handshake, for its read loop
// (parked while idle by p, if not nil).
func (s *Shard) connected(c *conn, info *ConnInfo, present bool, p Poller) {
	s.stats.connected.Add(1)
	s.stats.connections.Add(1)
	c.debug("client connected", "version", c.version, "session_present", present)
	c.outbox().add(c) // a resumed session may have messages waiting
	c.setDeadline(info.Deadline)
	c.canPark(p)
}
