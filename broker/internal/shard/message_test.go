package shard

import (
	"bytes"
	"crypto/tls"
	"net"
	"sync"
	"testing"
	"time"

	"berth.dev/broker/packet"
)

// TestMessageHeaders builds every cached header variant from several
// goroutines at once and checks each against a fresh encoding.
func TestMessageHeaders(t *testing.T) {
	src := &packet.Publish{QoS: 2, Topic: []byte("a/b/c"), Payload: []byte("payload"),
		Props: packet.Properties{ContentType: []byte("text/plain"), ResponseTopic: []byte("r"),
			UserProperties: []packet.UserProperty{{Key: []byte("k"), Value: []byte("v")}}}}
	tests := []struct {
		name string
		m    *message
	}{
		{"from a publish", newMessage(src, src.Topic, time.Now(), 1)},
		{"without reserved room", newSimpleMessage("a/b/c", []byte("payload"), 2, false, time.Now())},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					for _, v := range []byte{packet.Version311, packet.Version5} {
						for q := byte(0); q <= 2; q++ {
							if _, err := tc.m.header(v, q); err != nil {
								t.Error(err)
							}
						}
					}
				})
			}
			wg.Wait()
			for _, v := range []byte{packet.Version311, packet.Version5} {
				for q := byte(0); q <= 2; q++ {
					got, _ := tc.m.header(v, q)
					p := packet.Publish{QoS: q, Topic: tc.m.topic, Payload: tc.m.payload, Props: tc.m.props.full()}
					if q > 0 {
						p.PacketID = 1
					}
					want, err := p.AppendHeader(nil, v)
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(got, want) {
						t.Errorf("v%d QoS %d header\n got % x\nwant % x", v, q, got, want)
					}
				}
			}
			if string(tc.m.payload) != "payload" || string(tc.m.topic) != "a/b/c" {
				t.Fatalf("message bytes overwritten: %q %q", tc.m.topic, tc.m.payload)
			}
		})
	}
}

// wrapped is a connection wrapper that exposes the connection it writes
// to, as a PROXY protocol wrapper does.
type wrapped struct{ net.Conn }

func (w wrapped) NetConn() net.Conn { return w.Conn }

func TestVectorConn(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	tcp, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	pipe, other := net.Pipe()
	defer pipe.Close()
	defer other.Close()
	tests := []struct {
		name string
		nc   net.Conn
		want net.Conn
	}{
		{"tcp", tcp, tcp},
		{"wrapped tcp", wrapped{tcp}, tcp},
		{"pipe", pipe, nil},
		{"wrapped pipe", wrapped{pipe}, nil},
		{"tls", tls.Client(tcp, &tls.Config{InsecureSkipVerify: true}), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := vectorConn(tc.nc); got != tc.want {
				t.Fatalf("vectorConn = %v, want %v", got, tc.want)
			}
		})
	}
}
