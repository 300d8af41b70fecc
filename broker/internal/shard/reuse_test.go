package shard

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// TestBuffersNotReusedWhileHeld publishes self-describing payloads of
// every size class, 64 KiB included, into two tenants' shards in
// poisoning mode (every pooled buffer is overwritten when given back),
// from publishers that reconnect and take themselves over, to persistent
// subscribers that disconnect (their messages queue, stored or in
// memory), come back (the inflight window and queue are redelivered) and
// are taken over, one of them a slow reader with a small socket buffer
// (its writer holds partly written batches), while retained messages change and clean subscribers
// read the retained store and, on the durable tenant, a replay of the
// log. Every delivered payload must be byte-exact and the receiving
// tenant's own: a buffer reused or freed while a queue, inflight window,
// retained store, replay or writer still held it shows up as a wrong
// payload. The schedule is random; the seed is logged.
func TestBuffersNotReusedWhileHeld(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rounds := 300
	if testing.Short() {
		rounds = 100
	}
	world := newReuseWorld(t)
	var wg sync.WaitGroup
	for ti, tn := range world {
		subs := make([]*reuseSub, 3)
		for i := range subs {
			s, err := tn.newSub(fmt.Sprintf("sub%d", i), byte(min(i, 1)), i == 2)
			if err != nil {
				t.Fatal(err)
			}
			subs[i] = s
		}
		pubsDone := make(chan struct{})
		var pubs sync.WaitGroup
		for pi := range 2 {
			pubs.Add(1)
			rng := rand.New(rand.NewPCG(seed, uint64(ti*10+pi)))
			go func() {
				defer pubs.Done()
				if err := runPublisher(tn, byte(pi), rng, rounds); err != nil {
					t.Error(err)
				}
			}()
		}
		go func() { pubs.Wait(); close(pubsDone) }()
		wg.Add(1)
		rng := rand.New(rand.NewPCG(seed, uint64(ti*10+9)))
		go func() {
			defer wg.Done()
			if err := churn(tn, subs, rng, pubsDone); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	for _, tn := range world {
		if err := tn.peek("final", 300*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		t.Logf("tenant %c: %d published, %d deliveries checked (%d of 64 KiB, %d retained, %d replayed), %d wrong",
			tn.id, tn.published.Load(), tn.checked.Load(), tn.big.Load(), tn.retained.Load(), tn.replayed.Load(), tn.bad.Load())
		if tn.big.Load() == 0 || tn.retained.Load() == 0 || (tn.durable && tn.replayed.Load() == 0) {
			t.Errorf("tenant %c: the schedule did not exercise every holder", tn.id)
		}
	}
}

// runPublisher publishes rounds messages of random sizes, QoS and topics,
// some retained, reconnecting now and then and sometimes taking its own
// session over.
func runPublisher(tn *reuseTenant, pub byte, rng *rand.Rand, rounds int) error {
	p, err := tn.newPub(pub)
	if err != nil {
		return err
	}
	defer p.close()
	for range rounds {
		switch r := rng.IntN(100); {
		case r < 3:
			if err := p.connect(); err != nil { // takeover: connect before the old one closes
				return err
			}
		case r < 6:
			p.close()
			p.conn = nil
			if err := p.connect(); err != nil {
				return err
			}
		default:
			if err := p.publish(rng.IntN(len(reuseSizes)), byte(rng.IntN(2)), r < 16, rng.IntN(4)); err != nil {
				return err
			}
		}
	}
	return nil
}

// churn disconnects, resumes and takes over the subscribers and runs
// clean retained/replay readers until the publishers are done, then
// resumes every subscriber, lets them drain and closes them.
func churn(tn *reuseTenant, subs []*reuseSub, rng *rand.Rand, pubsDone <-chan struct{}) error {
	defer func() {
		for _, s := range subs {
			s.close()
		}
	}()
	for i := 0; i < 1000; i++ {
		select {
		case <-pubsDone:
			for _, s := range subs {
				if err := s.reconnect(false); err != nil {
					return err
				}
			}
			return tn.peek(fmt.Sprintf("drain%d", i), 300*time.Millisecond)
		default:
		}
		s := subs[rng.IntN(len(subs))]
		var err error
		switch r := rng.IntN(10); {
		case r < 4:
			// Offline until about 20 more messages were published to
			// this tenant: they queue for the session.
			s.disconnect()
			waitPublished(tn, 20, pubsDone)
			err = s.reconnect(false)
		case r < 7:
			err = s.reconnect(true)
		default:
			err = tn.peek(fmt.Sprintf("peek%d", i), 30*time.Millisecond)
		}
		if err != nil {
			return err
		}
	}
	<-pubsDone
	return nil
}

// waitPublished polls until n more messages were published to tn, the
// publishers finish (done closed; nil: not watched), or a second passes.
func waitPublished(tn *reuseTenant, n int64, done <-chan struct{}) {
	want := tn.published.Load() + n
	for deadline := time.Now().Add(time.Second); tn.published.Load() < want && time.Now().Before(deadline); {
		select {
		case <-done:
			return
		case <-time.After(time.Millisecond):
		}
	}
}

// FuzzBufferSchedule runs a schedule of publishes (sizes, QoS, retain,
// topics), subscriber disconnects, resumptions, takeovers and
// retained/replay readers, one step at a time, against two tenants'
// shards in poisoning mode; every delivery must be byte-exact and the
// tenant's own. The seed corpus (testdata/fuzz/FuzzBufferSchedule) runs
// with the tests; `go test -fuzz FuzzBufferSchedule` searches further.
func FuzzBufferSchedule(f *testing.F) {
	f.Add([]byte{0, 2, 4, 6, 8, 1, 3, 5, 7, 9})
	f.Add([]byte{0x0c, 0x6c, 0x0e, 0x02, 0x0a, 0x62, 0x0c, 0x1e})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 48 {
			ops = ops[:48]
		}
		world := newReuseWorld(t)
		var subs [2][2]*reuseSub
		var pubs [2]*reusePub
		for ti, tn := range world {
			for i := range subs[ti] {
				s, err := tn.newSub(fmt.Sprintf("sub%d", i), byte(i), false)
				if err != nil {
					t.Fatal(err)
				}
				subs[ti][i] = s
			}
			p, err := tn.newPub(0)
			if err != nil {
				t.Fatal(err)
			}
			pubs[ti] = p
		}
		for i, op := range ops {
			ti := op & 1
			tn, s := world[ti], subs[ti][op>>1&1]
			var err error
			switch op >> 2 & 7 {
			case 0, 1, 2, 3: // publish: size, QoS and retain from the high bits
				err = pubs[ti].publish(int(op>>4), op>>2&1, op&0x80 != 0 && op&0x40 != 0, int(op>>3&3))
			case 4:
				s.disconnect()
			case 5:
				err = s.reconnect(false)
			case 6:
				err = s.reconnect(true)
			case 7:
				err = tn.peek(fmt.Sprintf("peek%d", i), 20*time.Millisecond)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		for ti, tn := range world {
			pubs[ti].close()
			for _, s := range subs[ti] {
				if err := s.reconnect(false); err != nil {
					t.Fatal(err)
				}
			}
			if err := tn.peek("final", 100*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			for _, s := range subs[ti] {
				s.close()
			}
		}
	})
}
