package gateway

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"berth.dev/broker/packet"
)

// handshakeEnv is a gateway with one handshake slot (-max-handshakes 1)
// and limits per source loose enough for bursts from 127.0.0.1.
func handshakeEnv(t *testing.T, wait time.Duration) *testEnv {
	t.Helper()
	return newEnv(t, envOptions{config: func(c *Config) {
		c.MaxHandshakes, c.HandshakeWait = 1, wait
		c.PerIPRate, c.PerIPBurst, c.MaxPendingPerIP = 10_000, 10_000, 10_000
		c.AcceptRate, c.AcceptBurst = 10_000, 10_000
	}})
}

// A CONNECT that finds every handshake slot taken waits, and one that
// still finds none after -handshake-wait is refused protocol-correctly
// (MQTT 5 0x89 Server busy, 3.1.1 0x03), counted; a connection relayed
// before keeps flowing meanwhile; one that waits gets the slot when it
// frees. The test holds the gateway's only slot itself, as a handshake in
// progress would: a real one holds it for microseconds.
func TestHandshakeSlotsFull(t *testing.T) {
	e := handshakeEnv(t, time.Second)
	gw := e.addr(KindTCP)
	id, tok := e.credential(t, tenantAcme, nil)

	// An established client, relayed before the slot is taken.
	est, rc, err := connect311(t, "tcp://"+gw, id, tok, nil)
	if err != nil || rc != 0 {
		t.Fatalf("established client: rc=%d %v", rc, err)
	}
	relayed(t, e, id, packet.Version311, "dev-311")
	got := make(chan string, 16)
	if tk := est.Subscribe("devices/1/down", 1, func(_ mqtt.Client, m mqtt.Message) { got <- string(m.Payload()) }); !tk.WaitTimeout(5*time.Second) || tk.Error() != nil {
		t.Fatalf("subscribe: %v", tk.Error())
	}
	if n := testutil.ToFloat64(e.gw.hs.waits); n != 0 {
		t.Fatalf("%v handshakes waited with the slot free", n)
	}

	e.gw.hs.slots <- struct{}{} // a handshake in progress
	held := true
	defer func() {
		if held {
			<-e.gw.hs.slots
		}
	}()

	// MQTT 5: 0x89 Server busy.
	_, rc5, _ := connect5(t, gw, id, tok)
	if rc5 != packet.ErrServerBusy {
		t.Fatalf("MQTT 5 CONNECT with every slot taken: reason %#x, want 0x89 Server busy", byte(rc5))
	}
	// MQTT 3.1.1: return code 3 Server unavailable, then a normal close.
	if got, want := rawConnect(t, gw, connect311Bytes(t, id, tok)), []byte{0x20, 0x02, 0x00, 0x03}; !bytes.Equal(got, want) {
		t.Fatalf("3.1.1 CONNECT with every slot taken: got % X, want % X", got, want)
	}
	if n := testutil.ToFloat64(e.gw.m.refusals.WithLabelValues("", "server_busy")); n != 2 {
		t.Fatalf("refusals_total{reason=server_busy} = %v, want 2", n)
	}
	if n := testutil.ToFloat64(e.gw.hs.waits); n != 2 {
		t.Fatalf("handshake_waits_total = %v, want 2", n)
	}
	// A refusal already decided is counted, against its source too,
	// before it waits for a slot (a flood's cool-down must not wait), and
	// goes out when the wait is over.
	answer := make(chan []byte, 1)
	go func() { answer <- connectAnswer(t, gw, noCredentialsConnect(t)) }()
	waitUntil(t, func() bool { return testutil.ToFloat64(e.gw.m.refusals.WithLabelValues("", "bad_credentials")) == 1 })
	select {
	case got := <-answer:
		t.Fatalf("the refusal (% X) went out with every slot taken, before -handshake-wait", got)
	default:
	}
	if got := <-answer; !bytes.Equal(got, []byte{0x20, 0x02, 0x00, 0x04}) {
		t.Fatalf("refused CONNECT after waiting for a slot: got % X, want 20 02 00 04", got)
	}
	if failedByClient(refuseBusy) {
		t.Fatal("server_busy is the service's doing: it must not count toward the source's cool-down")
	}

	// The established client is not a handshake: it keeps flowing.
	for i := range 5 {
		msg := fmt.Sprintf("while busy %d", i)
		if tk := est.Publish("devices/1/down", 1, false, msg); !tk.WaitTimeout(5*time.Second) || tk.Error() != nil {
			t.Fatalf("publish with the slots taken: %v", tk.Error())
		}
		select {
		case m := <-got:
			if m != msg {
				t.Fatalf("echo %q, want %q", m, msg)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the established client's message did not come back while the slots were taken")
		}
	}

	// One that waits gets the slot once it frees.
	done := make(chan packet.ReasonCode, 1)
	go func() {
		_, rc, _ := connect5(t, gw, id, tok)
		done <- rc
	}()
	waitUntil(t, func() bool { return testutil.ToFloat64(e.gw.hs.waits) == 4 })
	<-e.gw.hs.slots
	held = false
	select {
	case rc := <-done:
		if rc != 0 {
			t.Fatalf("CONNECT that waited for the slot: reason %#x, want 0 (accepted)", byte(rc))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting CONNECT never finished")
	}
	waitUntil(t, func() bool { return len(e.gw.hs.slots) == 0 })
}

// A token whose JWT header never verified on this gateway is verified
// outside a slot (its key may have to be fetched, a wait no slot may
// hold): with every slot taken it still gets in. Once its header has
// verified, the next such token's signature check is work for a slot.
func TestHandshakeUnknownHeaderOutsideSlot(t *testing.T) {
	e := handshakeEnv(t, 200*time.Millisecond)
	gw := e.addr(KindTCP)
	id, tok := e.credential(t, tenantAcme, nil)
	e.gw.hs.slots <- struct{}{} // a handshake in progress
	defer func() { <-e.gw.hs.slots }()
	if _, rc, err := connect5(t, gw, id, tok); rc != 0 {
		t.Fatalf("first token of its header, every slot taken: reason %#x %v, want 0 (verified outside the slots)", byte(rc), err)
	}
	if !e.gw.hs.known.has([]byte(tok)) {
		t.Fatal("the header of a token that verified is not known")
	}
	if _, rc, _ := connect5(t, gw, id, tok); rc != packet.ErrServerBusy {
		t.Fatalf("known header, every slot taken: reason %#x, want 0x89 Server busy", byte(rc))
	}
}

// A burst of real CONNECTs, many more than the bound, at once (a fleet
// reconnecting, some with a bad token): with one slot and the default
// wait none is refused busy, the good ones are relayed, the bad ones get
// their own refusal, and every slot is free after. The same burst without
// the bound (-max-handshakes 100000) is timed too, for the report.
func TestHandshakeBurstWithinBound(t *testing.T) {
	for _, bound := range []int{1, 100_000} {
		t.Run(fmt.Sprintf("max-handshakes=%d", bound), func(t *testing.T) {
			e := handshakeEnv(t, time.Second)
			if bound != 1 {
				e = newEnv(t, envOptions{config: func(c *Config) {
					c.MaxHandshakes = bound
					c.PerIPRate, c.PerIPBurst, c.MaxPendingPerIP = 10_000, 10_000, 10_000
					c.AcceptRate, c.AcceptBurst = 10_000, 10_000
				}})
			}
			handshakeBurst(t, e)
		})
	}
}

// handshakeBurst connects good (relayed) and bad (wrong signature) 3.1.1
// clients to e all at once and checks each answer.
func handshakeBurst(t *testing.T, e *testEnv) {
	gw := e.addr(KindTCP)
	const good, bad = 40, 180 // good: within the test node's backlog of 64
	var ids, toks []string
	for range good {
		id, tok := e.credential(t, tenantAcme, nil)
		ids, toks = append(ids, id), append(toks, tok)
	}
	badConnect := connect311Bytes(t, ids[0], toks[0][:strings.LastIndexByte(toks[0], '.')+1]+strings.Repeat("A", 86))
	// One good connect first, so that the header is known and the burst's
	// signatures are checked in the slots (handshake.go).
	if got := connectAnswer(t, gw, connect311Bytes(t, ids[0], toks[0])); !bytes.Equal(got, []byte{0x20, 0x02, 0x00, 0x00}) {
		t.Fatalf("first CONNECT: got % X", got)
	}
	var wg sync.WaitGroup
	errs := make(chan string, good+bad)
	start := time.Now()
	for i := range good + bad {
		wg.Go(func() {
			if i < good {
				if got := connectAnswer(t, gw, connect311Bytes(t, ids[i], toks[i])); !bytes.Equal(got, []byte{0x20, 0x02, 0x00, 0x00}) {
					errs <- fmt.Sprintf("good CONNECT %d: got % X, want 20 02 00 00", i, got)
				}
				return
			}
			if got := connectAnswer(t, gw, badConnect); !bytes.Equal(got, []byte{0x20, 0x02, 0x00, 0x04}) {
				errs <- fmt.Sprintf("bad CONNECT %d: got % X, want 20 02 00 04", i, got)
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	close(errs)
	for s := range errs {
		t.Error(s)
	}
	t.Logf("%d CONNECTs at once (%d good) answered in %v with -max-handshakes %d; %v waited for a slot",
		good+bad, good, took, cap(e.gw.hs.slots), testutil.ToFloat64(e.gw.hs.waits))
	if n := testutil.ToFloat64(e.gw.m.refusals.WithLabelValues("", "server_busy")); n != 0 {
		t.Fatalf("%v refused busy", n)
	}
	waitUntil(t, func() bool { return len(e.gw.hs.slots) == 0 })
}

// connect311Bytes is a 3.1.1 CONNECT with a user name and password.
func connect311Bytes(t testing.TB, user, pass string) []byte {
	t.Helper()
	p := packet.Connect{ProtocolName: []byte("MQTT"), Version: packet.Version311, ClientID: []byte("dev-raw"), CleanStart: true, KeepAlive: 30,
		UsernameFlag: true, Username: []byte(user), PasswordFlag: true, Password: []byte(pass)}
	return mustConnect(t, packet.Version311, p)
}

// connectAnswer writes b and returns the first 4 bytes the gateway sends
// back (a CONNACK), then closes.
func connectAnswer(t testing.TB, addr string, b []byte) []byte {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(b); err != nil {
		return nil
	}
	out := make([]byte, 4)
	n, _ := io.ReadFull(c, out)
	return out[:n]
}

func TestKnownHeaders(t *testing.T) {
	var k knownHeaders
	a, b := []byte("aaa.x.sig"), []byte("bbb.y.sig")
	if k.has(a) || k.has([]byte("nodots")) {
		t.Fatal("known before add")
	}
	k.add(a)
	if !k.has([]byte("aaa.other.sig2")) || k.has(b) {
		t.Fatal("a header is known by its first segment only")
	}
	k.forget(a)
	if k.has(a) {
		t.Fatal("known after forget")
	}
	for i := range maxKnownHeaders + 1 {
		k.add(fmt.Appendf(nil, "h%d.x.y", i))
	}
	if len(k.m) > maxKnownHeaders {
		t.Fatalf("%d headers kept, bound %d", len(k.m), maxKnownHeaders)
	}
}
