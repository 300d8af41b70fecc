package e2e

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"berth.dev/e2e/internal/stack"
)

// The fault suite (fault_*_test.go, go test -run TestFault) drives real
// MQTT load through the gateways, injects one fault, and checks that every
// message a publisher got a PUBACK for reaches its persistent subscriber.
// Each case logs a FAULT line: what was injected, messages acked, lost
// (must be 0), duplicates (redeliveries, allowed at QoS 1), and the
// recovery time.

// faultLoad is QoS 1 load through gateways: publishers that reconnect by
// themselves, each publishing unique payloads and keeping the ones it got
// a successful PUBACK for, and one persistent subscriber that reconnects
// by itself (clean start 0, a session that outlives its connections) and
// counts what it receives.
type faultLoad struct {
	t     *testing.T
	addrs []string // gateways, tried in turn on every (re)connect
	cred  stack.Credential
	topic string

	mu       sync.Mutex
	acked    map[string]bool
	got      map[string]int // payload -> times received
	refused  map[byte]int   // PUBACKs with a failure reason code, by code
	ackCount atomic.Int64
	errored  atomic.Int64 // publishes that ended without a PUBACK (connection lost, timeout)
	lastErr  atomic.Value // string: the latest connect/publish error, for failure messages

	// Optional hooks, set before Publish and Subscribe: onAck runs for
	// every successful PUBACK, with when its connection was accepted
	// (CONNACK) and when the PUBACK came; onDrop when a client's
	// connection ends while the load runs.
	onAck  func(connected, at time.Time)
	onDrop func(at time.Time)

	stop    chan struct{} // ends every client
	pubStop chan struct{} // ends the publishers
	wg      sync.WaitGroup
	pubWG   sync.WaitGroup
}

func newFaultLoad(t *testing.T, addrs []string, c stack.Credential, topic string) *faultLoad {
	l := &faultLoad{t: t, addrs: addrs, cred: c, topic: topic,
		acked: map[string]bool{}, got: map[string]int{}, refused: map[byte]int{}, stop: make(chan struct{}), pubStop: make(chan struct{})}
	t.Cleanup(l.Stop)
	return l
}

// dial connects an MQTT 5 client through the first gateway that answers,
// starting at the one after the last used (try). It returns nil when none
// accepted the connection.
func (l *faultLoad) dial(try int, id string, cleanStart bool, onMsg func(paho.PublishReceived)) (*paho.Client, *paho.Connack) {
	addr := l.addrs[try%len(l.addrs)]
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		l.lastErr.Store(err.Error())
		return nil, nil
	}
	cfg := paho.ClientConfig{Conn: conn, PacketTimeout: 5 * time.Second, OnClientError: func(error) {}}
	if onMsg != nil {
		cfg.OnPublishReceived = []func(paho.PublishReceived) (bool, error){func(p paho.PublishReceived) (bool, error) {
			onMsg(p)
			return true, nil
		}}
	}
	cl := paho.NewClient(cfg)
	expiry := uint32(600)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ack, err := cl.Connect(ctx, &paho.Connect{
		ClientID: id, KeepAlive: 30, CleanStart: cleanStart,
		Username: l.cred.Username, UsernameFlag: true, Password: []byte(l.cred.Password), PasswordFlag: true,
		Properties: &paho.ConnectProperties{SessionExpiryInterval: &expiry},
	})
	if err != nil || ack == nil || ack.ReasonCode != 0 {
		l.lastErr.Store(fmt.Sprintf("connect %s via %s: %v %v", id, addr, ack, err))
		conn.Close()
		return nil, nil
	}
	return cl, ack
}

// Subscribe starts the persistent subscriber and returns once it has
// subscribed the first time.
func (l *faultLoad) Subscribe(id string) { l.subscribe(id, false) }

// Resume starts the persistent subscriber of a session that exists
// already (subscribed before, then left): it subscribes again only when
// the session is not present, which loses what it held.
func (l *faultLoad) Resume(id string) { l.subscribe(id, true) }

func (l *faultLoad) subscribe(id string, subscribed bool) {
	ready := make(chan struct{})
	if subscribed {
		close(ready)
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		for try := 0; ; try++ {
			cl, ack := l.dial(try, id, false, func(p paho.PublishReceived) {
				l.mu.Lock()
				l.got[string(p.Packet.Payload)]++
				l.mu.Unlock()
			})
			if cl == nil {
				select {
				case <-l.stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
				continue
			}
			if !subscribed || !ack.SessionPresent {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				sa, err := cl.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: l.topic + "/#", QoS: 1}}})
				cancel()
				if err != nil || sa.Reasons[0] >= 0x80 {
					l.lastErr.Store(fmt.Sprintf("subscribe: %v %v", sa, err))
					_ = cl.Disconnect(&paho.Disconnect{})
					time.Sleep(50 * time.Millisecond)
					continue
				}
				if !subscribed {
					subscribed = true
					close(ready)
				}
			}
			select {
			case <-cl.Done():
				if l.onDrop != nil {
					l.onDrop(time.Now())
				}
			case <-l.stop:
				_ = cl.Disconnect(&paho.Disconnect{})
				return
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(20 * time.Second):
		l.t.Fatalf("subscriber not subscribed within 20 s: %v", l.lastErr.Load())
	}
}

// faultRate paces each publisher client: below the rate quotas
// roomForLoad sets (2,000 a second per client), so that refusals for
// rate never mix into a fault's effects.
const faultRate = 1000

// Publish starts a publisher client with pipeline goroutines publishing
// at once, together at most faultRate messages a second, until Stop.
func (l *faultLoad) Publish(id string, pipeline int) {
	l.pubWG.Add(1)
	go func() {
		defer l.pubWG.Done()
		pace := time.NewTicker(time.Second / faultRate)
		defer pace.Stop()
		var seq atomic.Int64
		for try := 0; ; try++ {
			if !l.publishing() {
				return
			}
			cl, _ := l.dial(try, id, true, nil)
			if cl == nil {
				if !l.pause(50 * time.Millisecond) {
					return
				}
				continue
			}
			connected := time.Now()
			var workers sync.WaitGroup
			for range pipeline {
				workers.Add(1)
				go func() {
					defer workers.Done()
					for l.publishing() {
						select {
						case <-pace.C:
						case <-l.pubStop:
							return
						}
						payload := fmt.Sprintf("%s-%d", id, seq.Add(1))
						ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
						res, err := cl.Publish(ctx, &paho.Publish{Topic: l.topic + "/" + id, QoS: 1, Payload: []byte(payload)})
						cancel()
						if res == nil { // no PUBACK (a PUBACK with a failure code comes with an error too)
							l.errored.Add(1)
							l.lastErr.Store(err.Error())
							return
						}
						l.mu.Lock()
						if res.ReasonCode < 0x80 {
							l.acked[payload] = true
						} else {
							l.refused[res.ReasonCode]++
						}
						l.mu.Unlock()
						if res.ReasonCode < 0x80 {
							l.ackCount.Add(1)
							if l.onAck != nil {
								l.onAck(connected, time.Now())
							}
						}
					}
				}()
			}
			workers.Wait()
			if l.onDrop != nil && l.publishing() {
				l.onDrop(time.Now())
			}
			_ = cl.Disconnect(&paho.Disconnect{})
		}
	}()
}

func (l *faultLoad) publishing() bool {
	select {
	case <-l.stop:
		return false
	case <-l.pubStop:
		return false
	default:
		return true
	}
}

// pause waits d, or returns false at once when the publishers are stopping.
func (l *faultLoad) pause(d time.Duration) bool {
	select {
	case <-l.stop:
		return false
	case <-l.pubStop:
		return false
	case <-time.After(d):
		return true
	}
}

// Acked is the number of successful PUBACKs so far.
func (l *faultLoad) Acked() int64 { return l.ackCount.Load() }

// Received is how many distinct messages the subscriber has received.
func (l *faultLoad) Received() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.got)
}

// WaitAcked waits until more than n messages are acknowledged in all, and
// returns when that happened.
func (l *faultLoad) WaitAcked(n int64, within time.Duration) time.Time {
	l.t.Helper()
	deadline := time.Now().Add(within)
	for l.Acked() <= n {
		if time.Now().After(deadline) {
			l.t.Fatalf("no more than %d messages acknowledged after %v: %v", n, within, l.lastErr.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Now()
}

// StopPublishing ends the publishers and waits for them: the set of
// acknowledged messages is final then. The subscriber stays.
func (l *faultLoad) StopPublishing() {
	select {
	case <-l.pubStop:
	default:
		close(l.pubStop)
	}
	l.pubWG.Wait()
}

// Stop ends every client and waits for them.
func (l *faultLoad) Stop() {
	l.StopPublishing()
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

// faultResult is the outcome of a fault case.
type faultResult struct {
	acked, lost, dups, unacked, refused int
	refusedBy                           map[byte]int
	errored                             int // publishes without an answer: they may or may not have arrived
	received                            int // every copy the subscriber got, redeliveries included
	firstLost                           string
}

// Settle stops the publishers and waits (up to within) until the
// subscriber has received every acknowledged message, then compares.
func (l *faultLoad) Settle(within time.Duration) faultResult {
	l.t.Helper()
	l.StopPublishing()
	deadline := time.Now().Add(within)
	for {
		r := l.result()
		if r.lost == 0 || time.Now().After(deadline) {
			return r
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (l *faultLoad) result() faultResult {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := faultResult{acked: len(l.acked), refusedBy: maps.Clone(l.refused), errored: int(l.errored.Load())}
	for _, n := range l.refused {
		r.refused += n
	}
	for p := range l.acked {
		if l.got[p] == 0 {
			r.lost++
			if r.firstLost == "" || p < r.firstLost {
				r.firstLost = p
			}
		}
	}
	for p, n := range l.got {
		r.received += n
		r.dups += n - 1
		if !l.acked[p] {
			r.unacked++
		}
	}
	return r
}

// logFault writes the case's FAULT line and fails the test on a loss.
func logFault(t *testing.T, fault string, r faultResult, recovery time.Duration, extra string) {
	t.Helper()
	t.Logf("FAULT %s: acked %d, lost %d, duplicates %d, delivered unacked %d, refused %d %v, unanswered %d, recovery %v%s",
		fault, r.acked, r.lost, r.dups, r.unacked, r.refused, r.refusedBy, r.errored, recovery.Round(time.Millisecond), extra)
	if r.lost != 0 {
		t.Errorf("%s: %d of %d acknowledged messages never reached the persistent subscriber (first: %s)", fault, r.lost, r.acked, r.firstLost)
	}
	if r.acked == 0 {
		t.Errorf("%s: no message was acknowledged", fault)
	}
}

// roomForLoad puts a's tenant on the pro plan (the stack must open it:
// Options.OpenPlans "free,pro") with its message rates at the plan's
// bounds, so the fault load is not refused for its rate: a client past
// 100 refusals a second is disconnected (0x96), which would mix a quota's
// effect into the fault's.
func roomForLoad(t *testing.T, s *stack.Stack, a stack.Account) {
	t.Helper()
	if code := s.Do(t, "PATCH", "/v1/tenants/"+a.Tenant.ID, a.APIKey, map[string]string{"plan": "pro"}, nil); code != http.StatusOK {
		t.Fatalf("move tenant to pro: status %d", code)
	}
	s.SetQuota(t, a, "client_msgs_per_sec", 2000)
	s.SetQuota(t, a, "max_msgs_per_sec", 50_000)
}
