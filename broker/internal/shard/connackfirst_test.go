package shard

import (
	"sync"
	"sync/atomic"
	"testing"
)

// TestConnackFirstOnResume resumes a subscribed session over and over,
// with and without taking over its live connection, while a publisher
// floods its topic: the first packet on every new connection must be the
// CONNACK [MQTT-3.2.0-1], never a delivery routed to the session in the
// instant after it was attached.
func TestConnackFirstOnResume(t *testing.T) {
	t.Parallel()
	tn := newReuseWorld(t)[1]
	sub, err := tn.newSub("s", 0, false)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.close()
	pub, err := tn.newPub(0)
	if err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer pub.close()
		for i := 0; i < 2_000_000 && !stop.Load(); i++ {
			if err := pub.publish(1, 0, false, i%4); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for i := range 300 {
		if i%2 == 0 {
			sub.disconnect()
		}
		if err := sub.reconnect(true); err != nil { // dial reads the CONNACK first or fails
			t.Fatalf("resume %d: %v", i, err)
		}
	}
	stop.Store(true)
	wg.Wait()
	if tn.checked.Load() == 0 || tn.bad.Load() != 0 {
		t.Fatalf("%d deliveries checked, %d wrong", tn.checked.Load(), tn.bad.Load())
	}
}
