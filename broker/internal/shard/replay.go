package shard

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"berth.dev/broker/internal/store"
	"berth.dev/broker/internal/topic"
	"berth.dev/broker/packet"
)

// ReplayProperty is the MQTT 5 SUBSCRIBE user property that asks for the
// stored messages matching the new subscriptions since a point in the
// past: an RFC 3339 time or a message-log offset. They are delivered
// first, then the live stream continues, in order, without a gap or a
// duplicate.
const ReplayProperty = "berth-replay-from"

// replayReq is one SUBSCRIBE's replay: the start offset, and per filter
// the log end at the instant it was subscribed (under s.mu, so every
// message below end is replayed and every one from end on arrives live).
type replayReq struct {
	from    uint64
	filters []replayFilter
	held    bool // sess.replaying was incremented
}

type replayFilter struct {
	tree *topic.Tree // just this filter, to match topics against
	opts topic.Options
	end  uint64
}

// replayRequest reads the replay property of a SUBSCRIBE; nil when there
// is none (or no message log). A value that is neither an offset nor an
// RFC 3339 time is a protocol error.
func (c *conn) replayRequest(p *packet.Subscribe) (*replayReq, error) {
	s := c.shard
	if c.version != packet.Version5 || s.log == nil {
		return nil, nil
	}
	for _, up := range p.Props.UserProperties {
		if string(up.Key) != ReplayProperty {
			continue
		}
		from, err := s.replayStart(string(up.Value))
		if err != nil {
			c.debug("bad replay property", "value", string(up.Value), "err", err)
			return nil, packet.ErrProtocol
		}
		return &replayReq{from: from}, nil
	}
	return nil, nil
}

// replayStart resolves a replay property value to a log offset.
func (s *Shard) replayStart(v string) (uint64, error) {
	first := s.log.FirstOffset()
	if off, err := strconv.ParseUint(v, 10, 64); err == nil {
		return max(off, first), nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return 0, fmt.Errorf("shard: replay from %q: not an offset or RFC 3339 time", v)
	}
	r, err := s.log.ReadFrom(first)
	if err != nil {
		return 0, err
	}
	defer r.Close()
	ts := t.UnixNano()
	for {
		loc, err := r.NextLocation()
		if errors.Is(err, io.EOF) {
			return s.log.NextOffset(), nil
		}
		if err != nil {
			return 0, err
		}
		if loc.Timestamp >= ts {
			return loc.Offset, nil
		}
	}
}

// subscribeFilter adds one subscription. With a replay it does so under
// s.mu, which publishes hold while they append and route, and records the
// log end at that instant.
func (c *conn) subscribeFilter(filter string, opts topic.Options, rq *replayReq) (bool, error) {
	s, sess := c.shard, c.sess
	if rq == nil {
		return s.tree.Subscribe(sess.id, filter, opts)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	existed, err := s.tree.Subscribe(sess.id, filter, opts)
	if err != nil {
		return existed, err
	}
	if f, _ := topic.ParseFilter(filter, 0); f.Shared() {
		return existed, nil // a shared subscription is not replayed
	}
	one := topic.New(topic.Config{})
	if _, err := one.Subscribe(1, filter, opts); err != nil {
		return existed, nil
	}
	rq.filters = append(rq.filters, replayFilter{tree: one, opts: opts, end: s.nextOffset()})
	if !rq.held {
		rq.held = true
		sess.mu.Lock()
		sess.replaying++ // the writer holds live messages back
		sess.mu.Unlock()
	}
	return existed, nil
}

// runReplay collects the stored messages of a replay and hands them to
// the session ahead of the live ones it held back meanwhile.
func (c *conn) runReplay(rq *replayReq) {
	if rq == nil || !rq.held {
		return
	}
	s, sess := c.shard, c.sess
	entries, err := s.collectReplay(rq)
	if err != nil {
		c.logger().Warn("replay incomplete", "err", err)
	}
	sess.mu.Lock()
	for i, e := range entries {
		if sess.stored.len()+sess.queue.len() >= s.opts.MaxQueuedMessages {
			for range entries[i:] {
				sess.dropLocked(DropQueueFull)
			}
			break
		}
		sess.pushStoredLocked(e)
	}
	sess.replaying--
	sess.dirty = true
	sess.mu.Unlock()
	c.wakeWriter()
}

// collectReplay scans the log from rq.from to the filters' ends and
// returns the matching messages as stored entries, in log order.
func (s *Shard) collectReplay(rq *replayReq) ([]storedEntry, error) {
	var end uint64
	for _, f := range rq.filters {
		end = max(end, f.end)
	}
	if rq.from >= end {
		return nil, nil
	}
	if err := s.waitReadable(end - 1); err != nil {
		return nil, err
	}
	r, err := s.log.ReadFrom(rq.from)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var out []storedEntry
	var mt topic.Matches
	now := time.Now().UnixNano()
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) || (err == nil && rec.Offset >= end) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		if store.IsStateKey(rec.Key) {
			continue // QoS 2 state, not a message (qos2.go)
		}
		var meta store.Meta
		if _, err := store.DecodeMeta(rec.Key, &meta); err != nil {
			continue
		}
		if meta.Expires != 0 && now >= meta.Expires {
			continue // [MQTT-3.3.2-5]
		}
		if s.pastRuleRetention(meta.Topic, meta.Created, now) {
			continue // no longer retained for replay (topicrules.go)
		}
		var e storedEntry
		found := false
		for _, f := range rq.filters {
			if rec.Offset >= f.end {
				continue
			}
			f.tree.Match(meta.Topic, noPublisher, &mt)
			if len(mt.Deliveries) == 0 {
				continue
			}
			qos := min(meta.QoS, f.opts.QoS)
			if !found || qos > e.qos {
				e.qos = qos
			}
			if !found {
				e.off = rec.Offset
				e.subID = f.opts.SubscriptionID
			}
			e.retain = e.retain || (meta.Retain && f.opts.RetainAsPublished)
			found = true
		}
		if found {
			out = append(out, e)
		}
	}
}

// persistSubscriptions saves a persistent session after its subscriptions
// changed, so that under wal.SyncAlways a SUBACK means the subscription
// survives a crash.
func (c *conn) persistSubscriptions() error {
	s, sess := c.shard, c.sess
	sess.mu.Lock()
	persistent := sess.expiry != 0
	sess.mu.Unlock()
	if !persistent {
		return nil
	}
	if s.log != nil {
		// Messages logged before now are not for the new subscriptions:
		// move the cursor up to what is still pending.
		s.mu.Lock()
		sess.mu.Lock()
		sess.cursor = sess.cursorLocked(s.nextOffset())
		sess.mu.Unlock()
		s.mu.Unlock()
	}
	if err := s.saveSession(sess); err != nil && s.opts.Replication != nil {
		// Not committed by the tenant's group: no SUBACK/UNSUBACK.
		return fmt.Errorf("%w: %w", errNotServing, err)
	}
	return nil
}
