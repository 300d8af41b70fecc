package usage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Batch is one flush: the deltas of every tenant, tagged with the node and a
// sequence number that makes it idempotent.
type Batch struct {
	NodeID string
	Seq    int64
	Bucket time.Time // the minute the deltas are booked to
	Deltas []Delta
}

// Flusher periodically writes a Meter's deltas to Postgres.
type Flusher struct {
	pool     *pgxpool.Pool
	meter    *Meter
	nodeID   string
	interval time.Duration
	log      *slog.Logger
	now      func() time.Time
	// Sample, when set, is called at the start of every flush to bring the
	// meter up to date (a node folds its shards' counters in here).
	Sample func()

	errs atomic.Uint64 // failed flushes

	mu      sync.Mutex // serializes flushes; guards pending and lastSeq
	pending *Batch
	lastSeq int64

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// NewFlusher returns a flusher for meter, writing as nodeID every interval.
func NewFlusher(pool *pgxpool.Pool, meter *Meter, nodeID string, interval time.Duration, log *slog.Logger) *Flusher {
	return &Flusher{
		pool: pool, meter: meter, nodeID: nodeID, interval: interval, log: log, now: time.Now,
		stop: make(chan struct{}), done: make(chan struct{}),
	}
}

// Start runs the flush loop until Shutdown.
func (f *Flusher) Start() {
	go func() {
		defer close(f.done)
		t := time.NewTicker(f.interval)
		defer t.Stop()
		for {
			select {
			case <-f.stop:
				return
			case <-t.C:
				ctx, cancel := context.WithTimeout(context.Background(), f.interval)
				if err := f.Flush(ctx); err != nil {
					f.log.Warn("usage flush failed; will retry", "err", err)
				}
				cancel()
			}
		}
	}()
}

// Shutdown stops the loop and makes a last flush, so a graceful stop loses
// nothing.
func (f *Flusher) Shutdown(ctx context.Context) error {
	f.once.Do(func() { close(f.stop) })
	select {
	case <-f.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	return f.Flush(ctx)
}

// Flush writes the pending batch, if a previous attempt failed, and then the
// deltas counted since. On error the batch is kept, unchanged, for the next
// attempt.
func (f *Flusher) Flush(ctx context.Context) (err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	defer func() {
		if err != nil {
			f.errs.Add(1)
		}
	}()
	if f.pending != nil {
		if err := Write(ctx, f.pool, f.pending); err != nil {
			return err
		}
		f.pending = nil
	}
	if f.Sample != nil {
		f.Sample()
	}
	now := f.now()
	deltas := f.meter.take(now)
	if len(deltas) == 0 {
		return nil
	}
	// Sequence numbers must never repeat for a node id, across restarts too:
	// wall-clock nanoseconds, forced to increase.
	seq := now.UnixNano()
	if seq <= f.lastSeq {
		seq = f.lastSeq + 1
	}
	f.lastSeq = seq
	b := &Batch{NodeID: f.nodeID, Seq: seq, Bucket: now.UTC().Truncate(time.Minute), Deltas: deltas}
	if err := Write(ctx, f.pool, b); err != nil {
		f.pending = b
		return err
	}
	return nil
}

// Errors is the number of flushes that failed (their deltas were kept for
// the next attempt) since the flusher was made.
func (f *Flusher) Errors() uint64 { return f.errs.Load() }

// ErrAlreadyApplied reports that a batch's sequence number was applied
// before; Write treats it as success.
var ErrAlreadyApplied = errors.New("usage: batch already applied")

// Write applies b in one transaction. Applying the same batch again changes
// nothing: the (node id, seq) row in usage_flushes is inserted in the same
// transaction as the deltas, and its presence turns a retry into a no-op.
func Write(ctx context.Context, pool *pgxpool.Pool, b *Batch) error {
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO usage_flushes (node_id, seq) VALUES ($1, $2) ON CONFLICT DO NOTHING`, b.NodeID, b.Seq)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return ErrAlreadyApplied
		}
		var q pgx.Batch
		for _, d := range b.Deltas {
			q.Queue(`INSERT INTO usage (tenant_id, node_id, bucket, messages_in, messages_out, bytes_in, bytes_out, connection_seconds, stored_bytes, messages_accepted)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
				ON CONFLICT (tenant_id, bucket, node_id) DO UPDATE SET
					messages_in = usage.messages_in + EXCLUDED.messages_in,
					messages_accepted = usage.messages_accepted + EXCLUDED.messages_accepted,
					messages_out = usage.messages_out + EXCLUDED.messages_out,
					bytes_in = usage.bytes_in + EXCLUDED.bytes_in,
					bytes_out = usage.bytes_out + EXCLUDED.bytes_out,
					connection_seconds = usage.connection_seconds + EXCLUDED.connection_seconds,
					stored_bytes = EXCLUDED.stored_bytes`,
				d.TenantID, b.NodeID, b.Bucket, d.MessagesIn, d.MessagesOut, d.BytesIn, d.BytesOut,
				d.ConnectionNanos/int64(time.Second), d.StoredBytes, d.MessagesAccepted)
			for reason, n := range d.Drops {
				q.Queue(`INSERT INTO usage_drops (tenant_id, node_id, bucket, reason, count) VALUES ($1, $2, $3, $4, $5)
					ON CONFLICT (tenant_id, bucket, node_id, reason) DO UPDATE SET count = usage_drops.count + EXCLUDED.count`,
					d.TenantID, b.NodeID, b.Bucket, reason, n)
			}
			queueLatency(&q, b.NodeID, b.Bucket, &d)
			hour := b.Bucket.UTC().Truncate(time.Hour)
			for cred, tr := range d.Credentials {
				q.Queue(`INSERT INTO usage_credentials (tenant_id, credential_id, node_id, hour, messages_in, messages_out, bytes_in, bytes_out)
					VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
					ON CONFLICT (tenant_id, hour, credential_id, node_id) DO UPDATE SET
						messages_in = usage_credentials.messages_in + EXCLUDED.messages_in,
						messages_out = usage_credentials.messages_out + EXCLUDED.messages_out,
						bytes_in = usage_credentials.bytes_in + EXCLUDED.bytes_in,
						bytes_out = usage_credentials.bytes_out + EXCLUDED.bytes_out`,
					d.TenantID, cred, b.NodeID, hour, tr.MessagesIn, tr.MessagesOut, tr.BytesIn, tr.BytesOut)
			}
		}
		return tx.SendBatch(ctx, &q).Close()
	})
	if errors.Is(err, ErrAlreadyApplied) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("usage: write batch %s/%d: %w", b.NodeID, b.Seq, err)
	}
	return nil
}
