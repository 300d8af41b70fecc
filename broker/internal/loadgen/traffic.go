package loadgen

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"berth.dev/broker/internal/histogram"
)

// setupConcurrency bounds dials while the pub and pubsub clients connect.
const setupConcurrency = 64

// traffic is one pub or pubsub run.
type traffic struct {
	cfg    *Config
	d      *dialer
	prefix string
	pubs   []*publisher
	subs   []*subscriber
	errs   *errorCounts
	// readers is true once the read loops run; closeAll waits for them
	// only then.
	readers bool
	blocked atomic.Uint64 // publishers whose last write timed out after the stop
}

// topic returns the topic of index n.
func (t *traffic) topic(n int) string { return t.prefix + "/" + strconv.Itoa(n%t.cfg.Topics) }

// keepAlive is long enough that no client has to ping during the run
// (3.1.1 [MQTT-3.1.2-24]): the run, the drain and a margin, in seconds.
func keepAlive(d time.Duration) uint16 {
	return uint16(min(65535, int((2*d+time.Minute)/time.Second)))
}

func runTraffic(ctx context.Context, cfg *Config, d *dialer, runID string, progress io.Writer) (*Report, error) {
	t := &traffic{cfg: cfg, d: d, prefix: cfg.TopicPrefix, errs: newErrorCounts()}
	if t.prefix == "" {
		t.prefix = "berth-load/" + runID
	}
	defer t.closeAll()
	opts := func(role string, i int) connectOpts {
		return connectOpts{
			clientID:  fmt.Sprintf("%s-%s-%s%d", cfg.ClientPrefix, runID, role, i),
			keepAlive: keepAlive(cfg.Duration + cfg.Drain),
			user:      cfg.User, pass: cfg.Pass, v5: cfg.V5,
			writeBuf: max(32<<10, min(cfg.Payload+64, 1<<20)),
		}
	}

	// Subscribers first, so nothing published is missed.
	nsubs := cfg.subscribers()
	t.subs = make([]*subscriber, nsubs)
	err := parallel(ctx, nsubs, setupConcurrency, func(j int) error {
		c, err := connect(ctx, d, opts("s", j))
		if err != nil {
			return fmt.Errorf("subscriber %d: %w", j, err)
		}
		mine := make([]bool, cfg.Pubs)
		filter := t.prefix + "/#" // pub mode: count everything
		for i := range mine {
			mine[i] = cfg.Mode == ModePub || i%cfg.Topics == j%cfg.Topics
		}
		if cfg.Mode == ModePubSub {
			filter = t.topic(j)
		}
		if err := c.subscribe([]string{filter}, cfg.QoS, cfg.ConnectTimeout); err != nil {
			c.conn.Close()
			return fmt.Errorf("subscriber %d: %w", j, err)
		}
		t.subs[j] = newSubscriber(c, mine)
		return nil
	})
	if err != nil {
		return nil, err
	}
	t.pubs = make([]*publisher, cfg.Pubs)
	err = parallel(ctx, cfg.Pubs, setupConcurrency, func(i int) error {
		c, err := connect(ctx, d, opts("p", i))
		if err != nil {
			return fmt.Errorf("publisher %d: %w", i, err)
		}
		p, err := newPublisher(uint32(i), c, t.topic(i), cfg.QoS, cfg.Payload, cfg.Inflight)
		if err != nil {
			c.conn.Close()
			return fmt.Errorf("publisher %d: %w", i, err)
		}
		t.pubs[i] = p
		return nil
	})
	if err != nil {
		return nil, err
	}
	t.readers = true
	for _, s := range t.subs {
		go s.readLoop()
	}
	for _, p := range t.pubs {
		go p.readLoop()
	}

	// Publish.
	done := make(chan struct{})
	// Stopping also bounds writes still blocked on a saturated broker: they
	// get Drain to finish, so a run always ends.
	stopPublishing := sync.OnceFunc(func() {
		close(done)
		for _, p := range t.pubs {
			p.c.conn.SetWriteDeadline(time.Now().Add(cfg.Drain))
		}
	})
	stopProgress := t.startProgress(progress)
	start := time.Now()
	timer := time.AfterFunc(cfg.Duration, stopPublishing)
	cancelWatch := context.AfterFunc(ctx, stopPublishing)
	var wg sync.WaitGroup
	for _, p := range t.pubs {
		wg.Go(func() {
			err := p.run(done, start, cfg.Rate, cfg.Count)
			switch {
			case err == nil:
			case closed(done) && classify(err) == failTimeout:
				// Still blocked on the broker at the deadline: the broker
				// was saturated, which is what the run measures. Unflushed
				// messages show up as lost (QoS 0) or unacked (QoS 1, 2).
				t.blocked.Add(1)
			default:
				t.errs.add("publish: " + classify(err))
			}
		})
	}
	wg.Wait()
	pubEnd := time.Now()
	cancelWatch()
	timer.Stop()

	t.drain(ctx, pubEnd.Add(cfg.Drain))
	stopProgress()
	t.countDropped()
	t.closeAll()
	return t.report(start, pubEnd, runID), nil
}

// drain waits until every publisher's messages are acknowledged and every
// subscriber has what it is owed, until deadline or ctx ends, or until
// deliveries stop for a quiet second (QoS 0 loss never arrives).
func (t *traffic) drain(ctx context.Context, deadline time.Time) {
	quiet := min(time.Second, t.cfg.Drain)
	lastCount, lastMove := t.delivered(), time.Now()
	for time.Now().Before(deadline) && ctx.Err() == nil {
		settled := true
		for _, p := range t.pubs {
			if p.outstanding() > 0 && !closed(p.readDone) {
				settled = false
			}
		}
		for _, s := range t.subs {
			if s.unique.Load() < t.expected(s) && !closed(s.readDone) {
				settled = false
			}
		}
		if settled {
			return
		}
		if n := t.delivered(); n != lastCount {
			lastCount, lastMove = n, time.Now()
		} else if t.cfg.QoS == 0 && time.Since(lastMove) >= quiet && t.outstanding() == 0 {
			return
		}
		time.Sleep(2 * time.Millisecond) // polling a counter, not waiting for an event
	}
}

func (t *traffic) delivered() uint64 {
	var n uint64
	for _, s := range t.subs {
		n += s.received.Load()
	}
	return n
}

func (t *traffic) outstanding() uint64 {
	var n uint64
	for _, p := range t.pubs {
		n += p.outstanding()
	}
	return n
}

// expected is the number of unique messages owed to s so far.
func (t *traffic) expected(s *subscriber) uint64 {
	var n uint64
	for i, p := range t.pubs {
		if s.pubs[i] {
			n += p.sent.Load()
		}
	}
	return n
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// closeAll disconnects every client and waits for the readers. Safe to
// call twice.
func (t *traffic) closeAll() {
	var wg sync.WaitGroup
	for _, p := range t.pubs {
		if p != nil {
			wg.Go(func() { p.c.close() })
		}
	}
	for _, s := range t.subs {
		if s != nil {
			wg.Go(func() { s.c.close() })
		}
	}
	wg.Wait()
	if !t.readers {
		return
	}
	for _, p := range t.pubs {
		<-p.readDone
	}
	for _, s := range t.subs {
		<-s.readDone
	}
}

// countDropped counts the connections the broker closed before the end.
func (t *traffic) countDropped() {
	for _, p := range t.pubs {
		if closed(p.readDone) {
			t.errs.add("publisher connection: " + classify(p.readErr))
		}
	}
	for _, s := range t.subs {
		if closed(s.readDone) {
			t.errs.add("subscriber connection: " + classify(s.readErr))
		}
	}
}

// report builds the Report after closeAll; the readers are done, so their
// state can be read directly.
func (t *traffic) report(start, pubEnd time.Time, runID string) *Report {
	cfg := t.cfg
	r := &Report{
		Mode: cfg.Mode, QoS: cfg.QoS, Payload: cfg.Payload, Pubs: cfg.Pubs, Subs: len(t.subs),
		Topics: cfg.Topics, Rate: cfg.Rate, Inflight: cfg.Inflight,
		PublishSeconds: pubEnd.Sub(start).Seconds(),
	}
	for _, p := range t.pubs {
		if p.window != nil {
			r.Inflight = min(r.Inflight, cap(p.window)) // the server's Receive Maximum may be lower
		}
	}
	last := pubEnd.UnixNano()
	ackLat, e2e := histogram.New(), histogram.New()
	for _, p := range t.pubs {
		r.Sent += p.sent.Load()
		r.Acked += p.acked.Load()
		r.Rejected += p.rejected.Load()
		r.Unacked += p.outstanding()
		if n := p.strayAcks.Load(); n > 0 {
			t.errs.addN("ack for unknown packet id", n)
		}
		if cfg.QoS > 0 {
			last = max(last, p.lastAck.Load())
		}
		p.ackLat.mergeTotal(ackLat)
	}
	for _, s := range t.subs {
		sr := SubReport{Unexpected: s.unexpected, Duplicates: s.dups.Load()}
		for i, p := range t.pubs {
			if !s.pubs[i] {
				continue
			}
			sent, got := p.sent.Load(), s.sets[i].unique
			sr.Expected += sent
			sr.Delivered += got
			if got < sent {
				sr.Lost += sent - got
			}
		}
		r.Expected += sr.Expected
		r.Delivered += sr.Delivered
		r.Lost += sr.Lost
		r.Duplicates += sr.Duplicates
		r.Unexpected += sr.Unexpected
		r.PerSub = append(r.PerSub, sr)
		last = max(last, s.lastRecv.Load())
		s.lat.mergeTotal(e2e)
	}
	secs := time.Duration(last - start.UnixNano()).Seconds()
	r.MeasuredSeconds = secs
	mb := float64(cfg.Payload) / 1e6
	if secs > 0 {
		accepted := float64(r.Acked)
		r.AcceptedBasis = "acknowledged"
		switch {
		case cfg.QoS == 0 && len(t.subs) > 0:
			accepted = float64(r.Delivered) / float64(len(t.subs))
			r.AcceptedBasis = "counted by subscribers"
		case cfg.QoS == 0:
			// Nothing to count with: what the sockets took is all there is.
			accepted = float64(r.Sent)
			r.AcceptedBasis = "written to the socket (QoS 0, no subscriber)"
		}
		r.AcceptedPerSec = accepted / secs
		r.AcceptedMBPerSec = r.AcceptedPerSec * mb
		r.DeliveredPerSec = float64(r.Delivered) / secs
		r.DeliveredMBPerSec = r.DeliveredPerSec * mb
	}
	r.Latency = summarize(e2e)
	r.AckLatency = summarize(ackLat)
	r.Errors = t.errs.snapshot()
	r.BlockedAtStop = int(t.blocked.Load())

	if cfg.QoS > 0 {
		if r.Lost > 0 {
			r.Failures = append(r.Failures, fmt.Sprintf("%d messages lost at QoS %d", r.Lost, cfg.QoS))
		}
		if r.Unacked > 0 {
			r.Failures = append(r.Failures, fmt.Sprintf("%d messages never acknowledged", r.Unacked))
		}
		if r.Rejected > 0 {
			r.Failures = append(r.Failures, fmt.Sprintf("%d messages rejected by the broker", r.Rejected))
		}
	}
	if r.Unexpected > 0 {
		r.Failures = append(r.Failures, fmt.Sprintf("%d deliveries that were not owed (wrong topic or foreign payload)", r.Unexpected))
	}
	if cfg.QoS > 0 && r.Duplicates > 0 && cfg.QoS == 2 {
		r.Failures = append(r.Failures, fmt.Sprintf("%d duplicates at QoS 2", r.Duplicates))
	}
	if len(r.Errors) > 0 {
		r.Failures = append(r.Failures, "connections failed during the run: "+fmtReasons(r.Errors))
	}
	if r.Sent == 0 {
		r.Failures = append(r.Failures, "nothing was sent")
	}
	return r
}

// errorCounts counts failures by class across goroutines.
type errorCounts struct {
	mu sync.Mutex
	m  map[string]uint64
}

func newErrorCounts() *errorCounts { return &errorCounts{m: map[string]uint64{}} }

func (e *errorCounts) add(class string) { e.addN(class, 1) }

func (e *errorCounts) addN(class string, n uint64) {
	e.mu.Lock()
	e.m[class] += n
	e.mu.Unlock()
}

func (e *errorCounts) total() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	var n uint64
	for _, v := range e.m {
		n += v
	}
	return n
}

func (e *errorCounts) snapshot() map[string]uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.m) == 0 {
		return nil
	}
	out := make(map[string]uint64, len(e.m))
	for k, v := range e.m {
		out[k] = v
	}
	return out
}

// parallel runs fn(0..n-1) with at most limit at a time and returns the
// first error; it stops starting new calls after an error or when ctx ends.
func parallel(ctx context.Context, n, limit int, fn func(i int) error) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	sem := make(chan struct{}, limit)
	for i := range n {
		mu.Lock()
		failed := len(errs) > 0
		mu.Unlock()
		if failed || ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := fn(i); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(errs) == 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		return nil
	}
	return fmt.Errorf("loadgen: connecting clients: %d failed, the first: %w", len(errs), errs[0])
}
