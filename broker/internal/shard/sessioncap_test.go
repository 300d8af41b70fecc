package shard

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"berth.dev/broker/internal/store"
	"berth.dev/broker/packet"
)

// A session saved before the expiry cap existed (or was lowered), here a
// 3.1.1 clean-session-0 one that never expires, takes the cap when the
// shard loads it.
func TestRestoredSessionsTakeTheExpiryCap(t *testing.T) {
	t.Parallel()
	st := store.NewMemory()
	for _, id := range []string{"never", "long"} {
		exp := uint32(neverExpires)
		if id == "long" {
			exp = 3600
		}
		if err := st.SaveSession(&store.Session{ClientID: id, ExpiryInterval: exp, DisconnectedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	b := startBroker(t, Options{Store: st, MaxSessionExpiry: 1}, ConnInfo{})
	if got := b.shard.Stats().Sessions; got != 2 {
		t.Fatalf("%d sessions restored, want 2", got)
	}
	eventually(t, "restored sessions expiring under the cap", func() bool { return b.shard.Stats().Sessions == 0 })
}

// The sessions cap is checked and the session created in one step: many
// CONNECTs racing for the last place, one gets it.
func TestSessionCapRaceAtTheEdge(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{MaxSessions: 2}, ConnInfo{})
	v5Client(t, b, "first")
	const racers = 16
	clients := make([]*rawClient, racers)
	for i := range clients {
		clients[i] = dialRaw(t, b.addr, packet.Version5)
	}
	var wg sync.WaitGroup
	codes := make([]packet.ReasonCode, racers)
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := (&packet.Connect{ClientID: []byte(fmt.Sprint("racer-", i)), CleanStart: true}).Append(nil, packet.Version5)
			if err != nil {
				codes[i] = 0xFF
				return
			}
			_ = c.nc.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := c.nc.Write(b); err != nil {
				codes[i] = 0xFF
				return
			}
			fh, body, err := c.rd.ReadPacket(0)
			var ack packet.Connack
			if err != nil || ack.Decode(packet.Version5, fh, body) != nil {
				codes[i] = 0xFF
				return
			}
			codes[i] = ack.Reason
		}()
	}
	wg.Wait()
	won := 0
	for i, code := range codes {
		switch code {
		case packet.CodeSuccess:
			won++
		case packet.ErrQuotaExceeded:
		default:
			t.Fatalf("racer %d: CONNACK %v", i, code)
		}
	}
	if won != 1 || b.shard.Stats().Sessions != 2 {
		t.Fatalf("%d racers connected, %d sessions; want 1 and 2", won, b.shard.Stats().Sessions)
	}
}
