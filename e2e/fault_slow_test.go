package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"berth.dev/e2e/internal/stack"
)

// A stalled consumer: a subscriber that connects, subscribes, and then
// never reads a byte, while 256 MiB of messages matching its filter go
// through the gateway. The node holds at most the tenant's
// max_queued_bytes (here 1 MiB) for it and drops the rest, counted under
// queue_full: its memory does not grow with what the subscriber will not
// take. Meanwhile a well-behaved persistent subscriber gets every
// acknowledged QoS 1 message of the fault load.
//
// Memory is the node's resident set from /proc/<pid>/status: VmHWM (the
// peak) over the flood against VmRSS before it. The bound asserted is
// max_queued_bytes plus 96 MiB of room for the Go heap's garbage between
// collections (measured: about 40 MiB); without a bound the node holds
// what the socket buffers cannot (measured with max_queued_bytes at
// 512 MiB: +278 MiB).
func TestFaultStalledConsumerCannotGrowNodeMemory(t *testing.T) {
	t.Parallel()
	s := stack.New(t, bins, stack.Options{OpenPlans: "free,business"})
	a := s.Signup(t)
	// business: byte rates high enough that the flood is never refused
	// for rate (QoS 0 cannot be refused: the node would disconnect).
	if code := s.Do(t, "PATCH", "/v1/tenants/"+a.Tenant.ID, a.APIKey, map[string]string{"plan": "business"}, nil); code != http.StatusOK {
		t.Fatalf("move tenant to business: status %d", code)
	}
	const queueQuota = 1 << 20
	for q, v := range map[string]int64{"max_queued_bytes": queueQuota, "client_bytes_per_sec": 1 << 30, "max_bytes_per_sec": 4 << 30,
		"client_msgs_per_sec": 100_000, "max_msgs_per_sec": 1_000_000} {
		s.SetQuota(t, a, q, v)
	}
	c := s.CreateCredential(t, a, []string{"fault/#"}, []string{"fault/#"}, nil)
	gw := s.Gateways[0].MQTT

	stalled := stallingSubscriber(t, gw, c, "slow-stalled", "fault/#")
	defer stalled.Close()
	l := newFaultLoad(t, []string{gw}, c, "fault/slow")
	l.Subscribe("slow-sub")
	l.Publish("slow-pub", 2)
	l.WaitAcked(l.Acked()+200, 30*time.Second)

	pid := s.Node.Pid()
	before := procStatusKiB(t, pid, "VmRSS")
	dropsBefore := nodeCounterMatch(t, s, "berth_node_drops_total", `reason="queue_full"`)

	// 256 MiB in 64 KiB QoS 0 messages from two publishers.
	const payload, total = 64 << 10, 256 << 20
	start := time.Now()
	errs := make(chan error, 2)
	for i := range 2 {
		bulk := mustConnectV5(t, gw, c, fmt.Sprintf("slow-bulk%d", i))
		go func() {
			body := make([]byte, payload)
			for range total / payload / 2 {
				if _, err := bulk.Publish(context.Background(), &paho.Publish{Topic: "fault/bulk", QoS: 0, Payload: body}); err != nil {
					errs <- err
					return
				}
			}
			// QoS 1 at the end: its PUBACK says the node has read all of them.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err := bulk.Publish(ctx, &paho.Publish{Topic: "fault/bulk", QoS: 1, Payload: body})
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("bulk publisher: %v", err)
		}
	}
	flood := time.Since(start)
	peak := procStatusKiB(t, pid, "VmHWM")
	after := procStatusKiB(t, pid, "VmRSS")
	dropped := nodeCounterMatch(t, s, "berth_node_drops_total", `reason="queue_full"`) - dropsBefore

	// The stalled subscriber is still connected (or closed for being slow,
	// 0x97, past the shard's slow-consumer timeout): either way the node
	// serves the others.
	l.WaitAcked(l.Acked()+200, 30*time.Second)
	r := l.Settle(30 * time.Second)
	growth := (peak - before) << 10
	logFault(t, "stalled consumer (never reads) under a 256 MiB flood", r, 0,
		fmt.Sprintf("; node RSS %d MiB before, peak %d MiB (+%d MiB), %d MiB after; max_queued_bytes %d MiB; %d copies dropped queue_full; flood took %v",
			before>>10, peak>>10, growth>>20, after>>10, queueQuota>>20, dropped, flood.Round(time.Millisecond)))
	if limit := int64(queueQuota + 96<<20); growth > limit {
		t.Errorf("node RSS grew by %d MiB during the flood, over max_queued_bytes + 96 MiB (%d MiB)", growth>>20, limit>>20)
	}
	if dropped == 0 {
		t.Errorf("no copy dropped queue_full: the stalled subscriber's queue never filled (flood too small?)")
	}
}

// stallingSubscriber connects an MQTT 5 client over a raw socket, reads
// its CONNACK and SUBACK, and then never reads again.
func stallingSubscriber(t *testing.T, addr string, c stack.Credential, id, filter string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	str := func(b []byte, s string) []byte { return append(append(b, byte(len(s)>>8), byte(len(s))), s...) }
	packetOf := func(first byte, body []byte) []byte {
		b := []byte{first}
		for n := len(body); ; {
			d := byte(n % 128)
			n /= 128
			if n > 0 {
				b = append(b, d|0x80)
				continue
			}
			b = append(b, d)
			break
		}
		return append(b, body...)
	}
	connect := str(nil, "MQTT")
	connect = append(connect, 5, 0xC2, 0x02, 0x58, 0) // v5; user name, password, clean start; keep alive 600 s; no properties
	connect = str(str(str(connect, id), c.Username), c.Password)
	sub := str([]byte{0, 1, 0}, filter) // packet id 1, no properties
	sub = append(sub, 1)                // QoS 1
	if _, err := conn.Write(append(packetOf(0x10, connect), packetOf(0x82, sub)...)); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReaderSize(conn, 1) // read no more than the two packets
	for _, want := range []byte{0x20, 0x90} {
		first, err := br.ReadByte()
		if err != nil || first != want {
			t.Fatalf("stalling subscriber: packet %#x (%v), want %#x", first, err, want)
		}
		n, mul := 0, 1
		for {
			d, err := br.ReadByte()
			if err != nil {
				t.Fatal(err)
			}
			n += int(d&0x7f) * mul
			mul *= 128
			if d&0x80 == 0 {
				break
			}
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(br, body); err != nil {
			t.Fatal(err)
		}
		if code := body[len(body)-1]; want == 0x20 && body[1] != 0 || want == 0x90 && code >= 0x80 {
			t.Fatalf("stalling subscriber refused: %x", body)
		}
	}
	return conn
}

// procStatusKiB reads a kB field of /proc/<pid>/status.
func procStatusKiB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			v, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("%s: %q: %v", field, line, err)
			}
			return v
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}
