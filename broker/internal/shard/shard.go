package shard

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"sync/atomic"
	"time"

	"berth.dev/broker/internal/store"
	"berth.dev/broker/internal/topic"
	"berth.dev/broker/internal/topicrule"
	"berth.dev/broker/internal/wal"
	"berth.dev/broker/packet"
)

// noPublisher is the SubscriberID of messages no client published (wills
// of ended sessions, $SYS); no session uses it, so No Local never drops
// them.
const noPublisher topic.SubscriberID = 0

// Shard is one tenant's complete, isolated broker: its own topic tree,
// sessions, retained messages and statistics. Connections are handed to
// ServeConn by whoever accepted them.
type Shard struct {
	opts     Options
	tree     *topic.Tree
	retained *topic.Retained[*message]
	store    store.Store
	ownStore bool        // created by New, so closed by Shutdown
	log      *wal.Log    // the message log; nil keeps messages in memory only
	app      logAppender // where message-log records go (replication.go); nil without a log
	syncAcks bool        // acknowledgements wait for app.WaitDurable
	saveMu   sync.Mutex  // orders session records written to the store
	acks     ackSyncer
	// routable: under syncAcks, message-log offsets below it are durable by
	// the rule in force (fsynced, or committed and applied here), so their
	// messages may be delivered; a cache of app.Durable (deliverableLocked).
	routable atomic.Uint64
	started  time.Time
	stats    counters
	topics   topicStats    // per-topic traffic for the admin view
	connSeq  atomic.Uint64 // conn_id in logs
	// Limits that change live (SetLimits); Options hold the initial ones.
	maxInflight    atomic.Int64
	maxQueuedBytes atomic.Int64
	maxPacket      atomic.Int64 // Options.MaxPacketSize, changed live by SetMaxPacketSize
	retention      retentionState
	rules          atomic.Pointer[topicrule.Set] // the tenant's topic rules (topicrules.go); nil none
	caps           sessionCaps                   // MaxSessions, MaxSessionExpiry (sessioncap.go)

	mu       sync.RWMutex
	sessions map[string]*session
	byID     map[topic.SubscriberID]*session
	conns    map[*conn]bool // value: attached to a session (has a writer)
	nextID   topic.SubscriberID
	closing  bool
	running  bool

	conwg    sync.WaitGroup // ServeConn calls
	bgwg     sync.WaitGroup // background goroutines ($SYS)
	stopBg   chan struct{}
	matches  sync.Pool // *topic.Matches for publishes not made by a connection
	readBufs sync.Pool // *[readBufSize]byte, read buffers of connections with input
	inbound  sync.Pool // *inbound, scratch of readers with input
	bigBufs  sync.Pool // *bigBuf, read buffers grown for big packets
	batches  sync.Pool // *batch, write state of connections with output
	connects sync.Pool // *connectScratch, of connections in CONNECT
	msgBufs  msgPool   // buffers of big messages, reference-counted (msgbuf.go)
	dlq      deadLetters

	hs handshakes // bounds the handshakes running at once (handshakes.go)
}

// New returns a shard with the given options. It loads retained messages
// and persistent sessions from opts.Store.
func New(opts Options) *Shard {
	ownStore := opts.Store == nil
	opts = opts.withDefaults()
	s := &Shard{
		opts:     opts,
		tree:     topic.New(topic.Config{}),
		retained: topic.NewRetained[*message](),
		store:    opts.Store,
		ownStore: ownStore,
		log:      opts.MessageLog,
		started:  time.Now(),
		sessions: make(map[string]*session),
		byID:     make(map[topic.SubscriberID]*session),
		conns:    make(map[*conn]bool),
		stopBg:   make(chan struct{}),
	}
	s.matches.New = func() any { return new(topic.Matches) }
	s.readBufs.New = func() any { return new([readBufSize]byte) }
	s.batches.New = func() any { return new(batch) }
	s.connects.New = func() any { return new(connectScratch) }
	s.hs.init(opts.handshakes)
	s.inbound.New = func() any {
		in := new(inbound)
		in.matches.Ready = s.readyLocked
		in.slab.pool = &s.msgBufs // big messages in pooled buffers (msgbuf.go)
		return in
	}
	s.dlq.wake = make(chan struct{}, 1)
	s.msgBufs.poison = opts.poisonFreed
	s.maxInflight.Store(int64(opts.MaxInflight))
	s.maxQueuedBytes.Store(int64(opts.MaxQueuedBytes))
	s.maxPacket.Store(int64(opts.MaxPacketSize))
	s.caps.maxSessions.Store(int64(max(opts.MaxSessions, 0)))
	s.caps.maxExpiry.Store(opts.MaxSessionExpiry)
	s.SetRetention(opts.Retention)
	s.acks.init()
	s.setAppender()
	s.load()
	return s
}

// load restores retained messages and offline sessions from the store.
func (s *Shard) load() {
	now := time.Now()
	err := s.store.Retained(func(sm *store.Message) bool {
		if sm.ExpiresAt.IsZero() || sm.ExpiresAt.After(now) {
			m := messageFromStore(sm)
			s.retained.Set(sm.Topic, m, m.size)
		}
		return true
	})
	if err != nil {
		s.opts.Logger.Warn("loading retained messages", "err", err)
	}
	var clamped []*session // positions past the log's end (cursorclamp.go)
	err = s.store.Sessions(func(ss *store.Session) bool {
		sess := s.newSessionLocked(ss.ClientID)
		sess.expiry, _ = s.capExpiry(ss.ExpiryInterval) // a cap lowered since it was saved applies
		sess.owner = ss.Owner
		sess.cursor, sess.q2pos = ss.Cursor, ss.Cursor
		if ss.QoS2From != 0 {
			sess.q2pos = ss.QoS2From - 1 // below the cursor (qos2.go)
		}
		if s.log != nil && sess.clampToLog(s.log.NextOffset()) {
			clamped = append(clamped, sess)
		}
		for _, sub := range ss.Subscriptions {
			_, _ = s.tree.Subscribe(sess.id, sub.Filter, topic.Options{
				QoS: sub.QoS, NoLocal: sub.NoLocal, RetainAsPublished: sub.RetainAsPublished,
				RetainHandling: topic.RetainHandling(sub.RetainHandling), SubscriptionID: sub.SubscriptionID,
			})
		}
		if sess.expiry != neverExpires {
			left := time.Until(ss.DisconnectedAt.Add(time.Duration(sess.expiry) * time.Second))
			sess.asideLocked().expiryTimer = time.AfterFunc(max(left, 0), s.expireFunc(sess, sess.gen))
		}
		return true
	})
	if err != nil {
		s.opts.Logger.Warn("loading sessions", "err", err)
	}
	s.saveClamped(clamped)
	if s.log != nil {
		start := time.Now()
		n, err := s.rebuildPending()
		if err != nil {
			s.opts.Logger.Error("rebuilding pending messages from the log", "err", err)
		}
		s.opts.Logger.Info("pending messages rebuilt from the log", "sessions", len(s.sessions),
			"pending", n, "took", time.Since(start))
	}
}

// Start starts the shard's background work (the $SYS publisher). It is
// idempotent; ctx bounds nothing after Start returns.
func (s *Shard) Start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running || s.closing {
		return nil
	}
	s.running = true
	s.bgwg.Add(1)
	go s.every(batchSweepInterval, s.sweepBatches)
	if s.opts.SysInterval > 0 {
		s.bgwg.Add(1)
		go s.sysLoop()
	}
	if s.opts.DeadLetters {
		s.bgwg.Add(1)
		go s.deadLetterLoop()
	}
	if s.log != nil {
		s.bgwg.Add(2)
		go s.checkpointLoop()
		go s.ackLoop()
	}
	return nil
}

// Shutdown stops accepting connections, sends every MQTT 5 client a
// DISCONNECT 0x8B (server shutting down), flushes and closes every
// connection, and waits for every goroutine the shard started, or for ctx.
// It is idempotent.
func (s *Shard) Shutdown(ctx context.Context) error {
	return s.ShutdownWith(ctx, packet.ErrServerShuttingDown)
}

// ShutdownWith is Shutdown telling MQTT 5 clients reason instead of 0x8B
// (e.g. 0x87 not authorized when the tenant was deleted); 3.1.1 clients
// are just closed [MQTT-4.8.0-1]. A connection already ending keeps the
// reason it was given first.
func (s *Shard) ShutdownWith(ctx context.Context, reason packet.ReasonCode) error {
	s.mu.Lock()
	first := !s.closing
	s.closing = true
	conns := make([]*conn, 0, len(s.conns))
	for c, attached := range s.conns {
		if attached {
			conns = append(conns, c)
		} else {
			c.shutSocket() // still in CONNECT: nothing to flush
		}
	}
	for _, sess := range s.sessions {
		sess.stopTimers()
	}
	s.mu.Unlock()
	if first {
		close(s.stopBg)
	}
	for _, c := range conns {
		c.kick(reason)
	}
	done := make(chan struct{})
	go func() {
		s.conwg.Wait()
		s.bgwg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if first {
		s.saveSessions()
		if s.ownStore {
			return s.store.Close()
		}
	}
	return nil
}

// assignClientID returns a fresh identifier for a client that sent none
// [MQTT-3.1.3-6].
func assignClientID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "berth-" + hex.EncodeToString(b[:])
}
