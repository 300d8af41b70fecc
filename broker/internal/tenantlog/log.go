package tenantlog

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"berth.dev/broker/internal/store"
	"berth.dev/broker/internal/wal"
)

// Entry layout constants (doc.go). Never change.
const (
	entryVersion   byte = 1
	kindMessage    byte = 1
	kindRetained   byte = 2 // store.LogRetained + 1
	kindSessions   byte = 3 // store.LogSessions + 1
	kindRemove     byte = 4 // message-log segments below an offset go
	snapshotLength      = 8
)

// Errors.
var (
	// ErrNotLeading: this node does not (or no longer) lead the group.
	ErrNotLeading = errors.New("tenantlog: not leading the tenant's group")
	// ErrCorrupt: an entry does not decode or does not fit the store.
	ErrCorrupt = errors.New("tenantlog: entry does not fit the store")
	// ErrBehind: the store holds less than a snapshot says (a snapshot
	// that came without the leader's checkpoint of the store, or one that
	// does not cover it).
	ErrBehind = errors.New("tenantlog: store is behind the group's snapshot")
)

// Proposer is the tenant's Raft group as the Log uses it (*replica.Group).
type Proposer interface {
	Propose(ctx context.Context, data []byte) error
}

// Options configure a Log.
type Options struct {
	// ProposeTimeout bounds one proposal; past it the leadership is taken
	// for lost (a leader without its quorum never commits). Default 5 s.
	ProposeTimeout time.Duration
	// MaxPending bounds the bytes of records waiting for the proposer;
	// Append and ReplicateKeyed wait past it. Default 16 MiB.
	MaxPending int
	Logger     *slog.Logger
}

// Log is one tenant's replicated store on this node: the group's state
// machine everywhere, and on the leader the shard's message log
// (shard.Replication) and the store's replicator (store.Replicator).
type Log struct {
	st   *store.WAL
	msgs *wal.Log
	opts Options

	mu      sync.Mutex
	cond    *sync.Cond
	g       Proposer
	leading bool
	err     error  // why the node does not lead (ErrNotLeading until Lead)
	next    uint64 // leader: offset of the next message-log record
	buf     []byte // records waiting for the proposer (entryVersion first)
	spare   []byte
	queued  uint64 // tickets: batches of records handed in, ever
	done    uint64 // tickets committed
	durable uint64 // message-log offsets below it are committed and here (any leader's records)
	// own: offsets below it hold records committed before this node's
	// leadership (Lead's base) or proposed by it and committed (Propose
	// returned nil for their batch). Only these may be acknowledged: a
	// record another leader committed at an offset this node handed out
	// moves durable, never own.
	own    uint64
	wake   chan struct{}
	cancel context.CancelFunc // ends the current leadership's proposer
	wg     sync.WaitGroup

	scratch []wal.Entry // Apply's, owned by the group's loop
}

// New makes st a replicated store: its keyed writes go through the Log
// from now on (store.WAL.Replicate). The Log owns st (Close closes it).
func New(st *store.WAL, opts Options) *Log {
	if opts.ProposeTimeout <= 0 {
		opts.ProposeTimeout = 5 * time.Second
	}
	if opts.MaxPending <= 0 {
		opts.MaxPending = 16 << 20
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	l := &Log{st: st, msgs: st.Messages(), opts: opts, err: ErrNotLeading, wake: make(chan struct{}, 1)}
	l.cond = sync.NewCond(&l.mu)
	l.durable = l.msgs.NextOffset()
	st.Replicate(l)
	return l
}

// Store is the replicated store (for the shard: Options.Store and, with
// Messages(), Options.MessageLog).
// After Install the store is a new one.
func (l *Log) Store() *store.WAL {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.st
}

// Lead makes this node serve the tenant: it proposes a barrier through g
// and waits for it, so every entry committed before is in the store, then
// takes appends. It fails, leading nothing, when the barrier does not
// commit (not the leader any more, ctx).
func (l *Log) Lead(ctx context.Context, g Proposer) error {
	if err := g.Propose(ctx, []byte{entryVersion}); err != nil {
		return fmt.Errorf("tenantlog: barrier: %w", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.leading {
		return nil
	}
	l.g, l.leading, l.err = g, true, nil
	l.next = l.msgs.NextOffset()
	l.durable, l.own = l.next, l.next
	l.buf = append(l.buf[:0], entryVersion)
	pctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	l.wg.Add(1)
	go l.propose(pctx)
	return nil
}

// Leading reports whether the node serves the tenant (Lead succeeded and
// nothing failed since).
func (l *Log) Leading() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.leading
}

// Stop ends the leadership, if any: waiters and later writes fail with
// ErrNotLeading (or the proposal's error if one failed first). It waits
// for the proposer.
func (l *Log) Stop() {
	l.mu.Lock()
	l.failLocked(ErrNotLeading)
	l.mu.Unlock()
	l.wg.Wait()
}

// failLocked ends the leadership with err (the first cause stays).
func (l *Log) failLocked(err error) {
	if l.leading {
		l.leading, l.err = false, err
		l.buf = l.buf[:0]
		l.cancel()
	}
	l.cond.Broadcast()
}

// Close stops and closes the store.
func (l *Log) Close() error {
	l.Stop()
	return l.st.Close()
}

// propose is the leader's group commit: whatever records piled up while
// the last proposal ran go out as one entry.
func (l *Log) propose(ctx context.Context) {
	defer l.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.wake:
		}
		for {
			l.mu.Lock()
			if !l.leading || len(l.buf) <= 1 {
				l.mu.Unlock()
				break
			}
			batch, upto, end := l.buf, l.queued, l.next // the batch's records lie below end
			l.buf = append(l.spare[:0], entryVersion)
			l.cond.Broadcast() // room for writers waiting on MaxPending
			l.mu.Unlock()
			pctx, cancel := context.WithTimeout(ctx, l.opts.ProposeTimeout)
			err := l.g.Propose(pctx, batch)
			cancel()
			l.mu.Lock()
			l.spare = batch[:0]
			if err != nil {
				l.opts.Logger.Warn("tenant log: proposal failed; no longer serving", "err", err)
				l.failLocked(fmt.Errorf("%w: %w", ErrNotLeading, err))
				l.mu.Unlock()
				return
			}
			l.done = max(l.done, upto)
			l.own = max(l.own, end)
			l.cond.Broadcast()
			l.mu.Unlock()
		}
	}
}

// roomLocked waits until the pending records leave room for n bytes; it
// reports the leadership's end instead.
func (l *Log) roomLocked(n int) error {
	for l.leading && len(l.buf) > 1 && len(l.buf)+n > l.opts.MaxPending {
		l.cond.Wait()
	}
	if !l.leading {
		return l.err
	}
	return nil
}

func (l *Log) kick() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// Append implements shard.Replication: the record will be at the returned
// offset once committed. It does not wait for the commit.
func (l *Log) Append(key, payload []byte, count uint32) (uint64, error) {
	l.mu.Lock()
	if err := l.roomLocked(len(key) + len(payload) + 25); err != nil {
		l.mu.Unlock()
		return 0, err
	}
	off := l.next
	l.next += uint64(count)
	b := append(l.buf, kindMessage)
	b = binary.BigEndian.AppendUint64(b, off)
	b = binary.BigEndian.AppendUint32(b, count)
	b = appendBytes32(b, key)
	l.buf = appendBytes32(b, payload)
	l.queued++
	l.mu.Unlock()
	l.kick()
	return off, nil
}

// WaitDurable implements shard.Replication: it returns nil once the
// record this leadership named offset off is committed and in the store
// here; the leadership's end (ErrNotLeading, or the failed proposal's
// error) otherwise. A deposed leader applying another leader's record at
// off does not count: that is not the record its shard acknowledges.
func (l *Log) WaitDurable(off uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.ownDurableLocked() <= off && l.leading {
		l.cond.Wait()
	}
	if l.ownDurableLocked() > off {
		return nil
	}
	return l.err
}

// Durable implements shard.Replication: offsets below it hold this
// leadership's records (or ones committed before it), committed and here.
func (l *Log) Durable() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ownDurableLocked()
}

func (l *Log) ownDurableLocked() uint64 { return min(l.durable, l.own) }

// NextOffset implements shard.Replication.
func (l *Log) NextOffset() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.leading && l.next < l.msgs.NextOffset() {
		return l.msgs.NextOffset()
	}
	return l.next
}

// ReplicateKeyed implements store.Replicator: the records go with the next
// entry; it returns once that entry is committed and applied here.
func (l *Log) ReplicateKeyed(recs []store.KeyedRecord) error {
	size := 0
	for _, r := range recs {
		size += len(r.Key) + len(r.Payload) + 9
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.roomLocked(size); err != nil {
		return err
	}
	for _, r := range recs {
		l.buf = append(l.buf, r.Log+1)
		l.buf = binary.BigEndian.AppendUint32(l.buf, uint32(len(r.Key)))
		l.buf = append(l.buf, r.Key...)
		l.buf = appendBytes32(l.buf, r.Payload)
	}
	l.queued++
	ticket := l.queued
	l.kick()
	for l.done < ticket && l.leading {
		l.cond.Wait()
	}
	if l.done >= ticket {
		return nil
	}
	return l.err
}

// RemoveBefore implements the shard's segment removal (retention, and
// segments no session needs) for a replicated log: the decision goes
// through the group with the next entry, and every replica, this one too,
// deletes the message-log segments wholly below off (and older than
// keepSince, unless zero) when it applies it, so every replica's disk is
// bounded like the leader's. It returns before that: 0 segments now.
func (l *Log) RemoveBefore(off uint64, keepSince time.Time) (int, error) {
	var since int64
	if !keepSince.IsZero() {
		since = keepSince.UnixNano()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.roomLocked(17); err != nil {
		return 0, err
	}
	l.buf = append(l.buf, kindRemove)
	l.buf = binary.BigEndian.AppendUint64(l.buf, off)
	l.buf = binary.BigEndian.AppendUint64(l.buf, uint64(since))
	l.queued++
	l.kick()
	return 0, nil
}

func appendBytes32(b, v []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
	return append(b, v...)
}
