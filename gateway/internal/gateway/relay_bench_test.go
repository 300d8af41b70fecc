package gateway

import (
	"io"
	"net"
	"testing"
)

// benchmarkRelayRoundTrip measures one small packet's round trip
// (device -> relay -> node, echoed back), what a QoS 1 PUBLISH and its
// PUBACK cost through the gateway's two relay directions. direct is the same
// round trip without the relay, the baseline the relay adds to.
func benchmarkRelayRoundTrip(b *testing.B, mode string) {
	var client, server net.Conn
	switch mode {
	case "direct":
		client, server = tcpPair(b)
	default:
		client, server = relayPair(b, mode == "pooled")
	}
	go func() { // the node: echo
		buf := make([]byte, 4096)
		for {
			n, err := server.Read(buf)
			if err != nil {
				return
			}
			if _, err := server.Write(buf[:n]); err != nil {
				return
			}
		}
	}()
	msg := make([]byte, 90) // a 64 B PUBLISH with its topic and header
	buf := make([]byte, len(msg))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := client.Write(msg); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(client, buf); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRelayRoundTrip(b *testing.B) {
	for _, mode := range []string{"direct", "splice", "pooled"} {
		b.Run(mode, func(b *testing.B) { benchmarkRelayRoundTrip(b, mode) })
	}
}

// Relaying a chunk allocates nothing, spliced or through the pooled
// buffer: the hot path of every relayed connection.
func TestRelayChunkAllocs(t *testing.T) {
	for _, wrap := range []bool{false, true} {
		t.Run(map[bool]string{false: "spliced", true: "pooled buffer"}[wrap], func(t *testing.T) {
			client, server := relayPair(t, wrap)
			msg := make([]byte, 90)
			buf := make([]byte, len(msg))
			chunk := func() {
				if _, err := client.Write(msg); err != nil {
					t.Fatal(err)
				}
				if _, err := io.ReadFull(server, buf); err != nil {
					t.Fatal(err)
				}
			}
			chunk() // the relay's goroutines are running, the pipe or buffer taken
			if n := testing.AllocsPerRun(500, chunk); n != 0 {
				t.Fatalf("%v allocations per relayed chunk, want 0", n)
			}
		})
	}
}
