package shard

import (
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"berth.dev/broker/internal/wal"
	"berth.dev/broker/packet"
)

// diskFS is the operating system's filesystem with faults injected into the
// message log's segment files: while full is set every write fails with
// ENOSPC (nothing written), while syncErr is set every fsync fails with EIO.
type diskFS struct {
	wal.OSFS
	full    atomic.Bool
	syncErr atomic.Bool
}

func (d *diskFS) OpenFile(name string, flag int, perm fs.FileMode) (wal.File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	if !strings.HasSuffix(name, wal.SegmentSuffix) {
		return f, nil
	}
	return &diskFile{File: f, fs: d}, nil
}

type diskFile struct {
	*os.File
	fs *diskFS
}

// OSFile keeps mmapped indexes and sendfile working on the wrapped file.
func (f *diskFile) OSFile() *os.File { return f.File }

func (f *diskFile) Write(b []byte) (int, error) {
	if f.fs.full.Load() {
		return 0, &fs.PathError{Op: "write", Path: f.Name(), Err: syscall.ENOSPC}
	}
	return f.File.Write(b)
}

func (f *diskFile) Sync() error {
	if f.fs.syncErr.Load() {
		return &fs.PathError{Op: "fsync", Path: f.Name(), Err: syscall.EIO}
	}
	return f.File.Sync()
}

// faultyShard serves a shard whose message log (under policy) sits on a
// diskFS.
func faultyShard(t *testing.T, policy wal.Policy) (*testBroker, *diskFS) {
	t.Helper()
	dfs := &diskFS{}
	log, err := wal.Open(wal.Options{Dir: t.TempDir(), Fsync: policy, FS: dfs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = log.Close() })
	b := startBroker(t, Options{MessageLog: log}, ConnInfo{})
	return b, dfs
}

// publishQoS sends one QoS 1/2 PUBLISH numbered seq and returns the
// reason code of its PUBACK/PUBREC (completing a successful QoS 2 flow).
func publishQoS(c *rawClient, qos byte, id uint16, seq int) packet.ReasonCode {
	c.t.Helper()
	return c.publishAcked(&packet.Publish{QoS: qos, PacketID: id, Topic: []byte("disk/t"), Payload: []byte(strconv.Itoa(seq))})
}

// publishAcked sends a QoS 1/2 PUBLISH and returns the reason code of its
// PUBACK/PUBREC, completing a successful QoS 2 flow (PUBREL, PUBCOMP).
func (c *rawClient) publishAcked(p *packet.Publish) packet.ReasonCode {
	c.t.Helper()
	c.send(p)
	if p.QoS == 1 {
		return c.ack(packet.TypePuback).Reason
	}
	rec := c.ack(packet.TypePubrec)
	if rec.Reason < 0x80 {
		c.send(&packet.Ack{Type: packet.TypePubrel, PacketID: p.PacketID})
		c.ack(packet.TypePubcomp)
	}
	return rec.Reason
}

// TestDiskFullRefusesAndRecovers fills the message log's disk under a
// publisher, with the default fsync policy (interval) and with -fsync
// always: while it is full an MQTT 5 publisher gets PUBACK/PUBREC 0x97 and
// stays connected, a 3.1.1 one is disconnected unacknowledged; when space
// returns the same connection publishes again, without a restart. The
// persistent subscriber, offline throughout, then gets every acknowledged
// message and none of the refused ones.
func TestDiskFullRefusesAndRecovers(t *testing.T) {
	for _, policy := range []wal.Policy{wal.SyncInterval, wal.SyncAlways} {
		t.Run(policy.String(), func(t *testing.T) {
			b, dfs := faultyShard(t, policy)
			sub := dialRaw(t, b.addr, packet.Version5)
			cp := &packet.Connect{ClientID: []byte("disk-sub")}
			cp.Props.Has.Set(packet.PropSessionExpiry)
			cp.Props.SessionExpiry = 3600
			if ack := sub.connect(cp); ack.Reason != packet.CodeSuccess {
				t.Fatalf("CONNACK %v", ack.Reason)
			}
			sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("disk/#"), QoS: 1})
			sub.send(&packet.Disconnect{})
			sub.expectClosed()

			pub := v5Client(t, b, "disk-pub")
			acked := map[int]bool{}
			refused := map[int]bool{}
			seq := 0
			// publish sends the next message; want CodeSuccess accepts any
			// success code.
			publish := func(qos byte, want packet.ReasonCode) {
				t.Helper()
				seq++
				got := publishQoS(pub, qos, uint16(seq), seq)
				if got != want && (want != packet.CodeSuccess || got >= 0x80) {
					t.Fatalf("message %d (QoS %d): reason %v, want %v", seq, qos, got, want)
				}
				if got < 0x80 {
					acked[seq] = true
				} else {
					refused[seq] = true
				}
			}
			for range 20 {
				publish(1, packet.CodeSuccess)
			}
			dfs.full.Store(true)
			for range 10 {
				publish(1, packet.ErrQuotaExceeded)
			}
			publish(2, packet.ErrQuotaExceeded)
			old := dialRaw(t, b.addr, packet.Version311)
			old.connectOK("disk-pub-311")
			old.send(&packet.Publish{QoS: 1, PacketID: 1, Topic: []byte("disk/t"), Payload: []byte("311")})
			old.expectClosed() // no PUBACK: 3.1.1 cannot refuse, so it is not acknowledged

			dfs.full.Store(false)
			for range 20 {
				publish(1, packet.CodeSuccess)
			}
			publish(2, packet.CodeSuccess)

			// The subscriber returns: every acknowledged message, in order,
			// and nothing refused. The last acknowledged one ends the wait.
			sub = dialRaw(t, b.addr, packet.Version5)
			if ack := sub.connect(cp); !ack.SessionPresent {
				t.Fatal("session lost")
			}
			got := map[int]bool{}
			last := 0
			for last != seq {
				p := sub.publish()
				n, _ := strconv.Atoi(string(p.Payload))
				if refused[n] || string(p.Payload) == "311" {
					t.Fatalf("refused message %q delivered", p.Payload)
				}
				if n < last {
					t.Fatalf("message %d after %d", n, last)
				}
				got[n], last = true, n
				sub.send(&packet.Ack{Type: packet.TypePuback, PacketID: p.PacketID})
			}
			for n := range acked {
				if !got[n] {
					t.Fatalf("acknowledged message %d lost", n)
				}
			}
			t.Logf("FAULT disk full (%v): %d acked, 0 lost, %d refused with 0x97, recovered without a restart", policy, len(acked), len(refused))
		})
	}
}

// TestFsyncErrorRefuses fails the message log's fsync under -fsync always:
// the message waiting for it is never acknowledged (its publisher is
// disconnected with 0x80 and sends it again elsewhere), and the log then
// refuses appends (an fsync error is sticky: the page cache can no longer
// be trusted), so later publishes get PUBACK 0x80 instead of an ack that
// could be lost.
func TestFsyncErrorRefuses(t *testing.T) {
	b, dfs := faultyShard(t, wal.SyncAlways)
	pub := v5Client(t, b, "fsync-pub")
	for i := range 5 {
		if r := publishQoS(pub, 1, uint16(i+1), i); r != packet.CodeNoMatchingSubscribers {
			t.Fatalf("before the fault: %v", r)
		}
	}
	dfs.syncErr.Store(true)
	pub.send(&packet.Publish{QoS: 1, PacketID: 9, Topic: []byte("disk/t"), Payload: []byte("x")})
	pub.expectDisconnect(packet.ErrUnspecified)

	dfs.syncErr.Store(false)
	again := v5Client(t, b, "fsync-pub-2")
	for i := range 3 {
		if r := publishQoS(again, 1, uint16(i+1), i); r != packet.ErrUnspecified {
			t.Fatalf("after an fsync error: reason %v, want %v", r, packet.ErrUnspecified)
		}
	}
	// QoS 0 is never logged and keeps flowing.
	again.send(&packet.Publish{Topic: []byte("disk/t"), Payload: []byte("q0")})
	again.send(&packet.Ping{Type: packet.TypePingreq})
	again.read(packet.TypePingresp)
	t.Log("FAULT fsync error (always): 5 acked, the publish waiting for the failed fsync unacknowledged (DISCONNECT 0x80), the next 3 refused with PUBACK 0x80, 0 lost")
}
