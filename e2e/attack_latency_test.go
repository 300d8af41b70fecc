package e2e

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"berth.dev/e2e/internal/stack"
)

// latencyProbe is a victim tenant's steady QoS 1 traffic: publishers, each
// at a fixed rate, to one subscriber of the same tenant, timing every
// message from just before its PUBLISH to its arrival.
type latencyProbe struct {
	pubs []*v5

	mu      sync.Mutex
	phase   string
	arrived map[int][]int // publisher → sequence numbers in arrival order
	lat     []time.Duration
	sent    []time.Time // lat[i]'s message was sent at sent[i]
}

// latencyResult is one run of the probe.
type latencyResult struct {
	n        int
	p50, p99 time.Duration
	lat      []time.Duration // every sample, sorted
	// every sample in arrival order, with when its message was sent: when
	// the slow ones happened (slowWhen, fault_floodstat_test.go)
	sent   []time.Time
	unsort []time.Duration
}

// newLatencyProbe connects publishers clients of credential c and one
// subscriber to lat/#, all through the gateway at addr.
func newLatencyProbe(t *testing.T, addr string, c stack.Credential, publishers int) *latencyProbe {
	t.Helper()
	p := &latencyProbe{arrived: map[int][]int{}}
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	sub := paho.NewClient(paho.ClientConfig{
		Conn: conn,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(r paho.PublishReceived) (bool, error) {
			p.record(r.Packet.Topic, string(r.Packet.Payload), time.Now())
			return true, nil
		}},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ack, err := sub.Connect(ctx, &paho.Connect{ClientID: "probe-sub", KeepAlive: 30, CleanStart: true,
		Username: c.Username, UsernameFlag: true, Password: []byte(c.Password), PasswordFlag: true})
	if err != nil || ack.ReasonCode != 0 {
		t.Fatalf("probe subscriber: %v %v", ack, err)
	}
	t.Cleanup(func() { _ = sub.Disconnect(&paho.Disconnect{}) })
	if sa, err := sub.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "lat/#", QoS: 1}}}); err != nil || sa.Reasons[0] != 1 {
		t.Fatalf("probe subscribe: %v %v", sa, err)
	}
	for k := range publishers {
		p.pubs = append(p.pubs, mustDialV5(t, addr, c, fmt.Sprintf("probe-pub-%d", k)))
	}
	return p
}

// record notes one arrival: topic lat/<phase>/<publisher>, payload
// <seq>:<sent unix nanoseconds>.
func (p *latencyProbe) record(topic, payload string, at time.Time) {
	parts := strings.Split(topic, "/")
	seqSent := strings.SplitN(payload, ":", 2)
	if len(parts) != 3 || len(seqSent) != 2 {
		return
	}
	k, _ := strconv.Atoi(parts[2])
	seq, _ := strconv.Atoi(seqSent[0])
	sent, _ := strconv.ParseInt(seqSent[1], 10, 64)
	p.mu.Lock()
	defer p.mu.Unlock()
	if parts[1] != p.phase {
		p.arrived[-1] = append(p.arrived[-1], seq) // a message of another run: wrong
		return
	}
	p.arrived[k] = append(p.arrived[k], seq)
	p.lat = append(p.lat, at.Sub(time.Unix(0, sent)))
	p.sent = append(p.sent, time.Unix(0, sent))
}

// run publishes for d, each publisher every interval, waits for every
// message to arrive, and checks that each arrived exactly once and in
// its publisher's order. Timing is reported, never asserted.
func (p *latencyProbe) run(t *testing.T, phase string, d, interval time.Duration) latencyResult {
	t.Helper()
	p.mu.Lock()
	p.phase, p.arrived, p.lat, p.sent = phase, map[int][]int{}, nil, nil
	p.mu.Unlock()
	sent := make([]int, len(p.pubs))
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	for k, pub := range p.pubs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(interval)
			defer tick.Stop()
			topic := fmt.Sprintf("lat/%s/%d", phase, k)
			for now := range tick.C {
				if now.After(end) {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				payload := fmt.Appendf(nil, "%d:%d", sent[k], time.Now().UnixNano())
				pr, err := pub.Publish(ctx, &paho.Publish{Topic: topic, QoS: 1, Payload: payload})
				cancel()
				if err != nil || pr.ReasonCode != 0 {
					t.Errorf("victim publisher %d, message %d: %v %v", k, sent[k], pr, err)
					return
				}
				sent[k]++
			}
		}()
	}
	wg.Wait()
	total := 0
	for _, n := range sent {
		total += n
	}
	waitFor(t, 15*time.Second, fmt.Sprintf("the victim's %d messages (%s) to arrive", total, phase), func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.lat)+len(p.arrived[-1]) >= total
	})
	p.mu.Lock()
	defer p.mu.Unlock()
	if stray := p.arrived[-1]; len(stray) > 0 {
		t.Errorf("%s: %d messages of another run arrived", phase, len(stray))
	}
	for k, n := range sent {
		want := make([]int, n)
		for i := range want {
			want[i] = i
		}
		if !slices.Equal(p.arrived[k], want) {
			t.Errorf("%s: publisher %d sent 0..%d; the subscriber got %v: each must arrive exactly once, in order", phase, k, n-1, p.arrived[k])
		}
	}
	lat := slices.Clone(p.lat)
	slices.Sort(lat)
	return latencyResult{n: len(lat), p50: percentile(lat, 0.50), p99: percentile(lat, 0.99), lat: lat,
		sent: slices.Clone(p.sent), unsort: slices.Clone(p.lat)}
}

// percentile is the nearest-rank q-quantile of sorted.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
