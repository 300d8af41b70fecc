package replica

import (
	"bytes"
	"log/slog"
	"net"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// writeCounter counts the writes that reach it.
type writeCounter struct {
	bytes.Buffer
	writes int
}

func (w *writeCounter) Write(p []byte) (int, error) {
	w.writes++
	return w.Buffer.Write(p)
}

// appendMsg is a leader's append of n entries of size bytes each.
func appendMsg(n, size int) *pb.Message {
	m := &pb.Message{Type: pb.MsgApp.Enum(), From: new(uint64(1)), To: new(uint64(2)), Term: new(uint64(3)),
		LogTerm: new(uint64(3)), Index: new(uint64(40)), Commit: new(uint64(40))}
	for i := range n {
		m.Entries = append(m.Entries, &pb.Entry{Term: new(uint64(3)), Index: new(uint64(41 + i)),
			Type: pb.EntryNormal.Enum(), Data: bytes.Repeat([]byte{byte(i)}, size)})
	}
	return m
}

// TestFrameWriterEncodesMessagesInPlace: raft messages marshalled straight
// into the frame buffer make the same frames, byte for byte, as their
// protobuf encoding written as a payload (the wire format is unchanged);
// the frames buffered between two flushes leave in one write, and the
// reader verifies and decodes every one.
func TestFrameWriterEncodesMessagesInPlace(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	msgs := []*pb.Message{appendMsg(3, 100), appendMsg(0, 0), appendMsg(1, 5000)}
	var inPlace, viaBytes writeCounter
	fw, ref := newFrameWriter(&inPlace, key), newFrameWriter(&viaBytes, key)
	for i, m := range msgs {
		n, err := fw.writeMsg(kindRaft, testGroup, m)
		if err != nil {
			t.Fatal(err)
		}
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if want := int(frameBytes(len(b))); n != want {
			t.Errorf("message %d: frame of %d B reported, want %d", i, n, want)
		}
		if _, err := ref.write(kindRaft, testGroup, b); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := fw.write(kindAlive, 0, []byte{0, 0, 0, 0, 0, 0, 0, 9}); err != nil {
		t.Fatal(err)
	}
	if inPlace.writes != 0 {
		t.Fatalf("%d writes before the flush", inPlace.writes)
	}
	if err := fw.flush(); err != nil {
		t.Fatal(err)
	}
	ref.write(kindAlive, 0, []byte{0, 0, 0, 0, 0, 0, 0, 9})
	ref.flush()
	if inPlace.writes != 1 {
		t.Errorf("%d frames went out in %d writes, want 1", len(msgs)+1, inPlace.writes)
	}
	if !bytes.Equal(inPlace.Bytes(), viaBytes.Bytes()) {
		t.Fatal("frames of messages encoded in place differ from frames of their encoding")
	}
	fr := newFrameReader(bytes.NewReader(inPlace.Bytes()), key)
	for i, want := range msgs {
		kind, group, payload, err := fr.read()
		if err != nil || kind != kindRaft || group != testGroup {
			t.Fatalf("frame %d: kind %d group %d: %v", i, kind, group, err)
		}
		got := new(pb.Message)
		if err := proto.Unmarshal(payload, got); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(got, want) {
			t.Errorf("frame %d: decoded %v, sent %v", i, got, want)
		}
	}
	if kind, _, _, err := fr.read(); err != nil || kind != kindAlive {
		t.Fatalf("last frame: kind %d: %v", kind, err)
	}
}

// TestSendMessagesAllocatesNothing: handing a Ready's messages to the peer
// senders allocates nothing in the group's loop (the messages are encoded
// by each peer's sender, into its reused frame buffer), and what is queued
// counts against QueueBytes by the data it carries.
func TestSendMessagesAllocatesNothing(t *testing.T) {
	silent, err := net.Listen("tcp", "127.0.0.1:0") // takes the connection, never answers the handshake
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	h := &Host{cfg: Config{NodeID: 1}.withDefaults()}
	h.ids.peerOf = map[uint64]uint64{2: 2}
	h.tr, err = newTransport(1, "127.0.0.1:0", []byte("berth-test-cluster-secret-0123456789"), 4096, 64<<20, slog.New(slog.DiscardHandler), nopFrames{})
	if err != nil {
		t.Fatal(err)
	}
	h.tr.start()
	defer h.tr.close()
	h.tr.addPeer(2, silent.Addr().String())
	msgs := []*pb.Message{appendMsg(16, 128)}
	allocs := testing.AllocsPerRun(200, func() {
		if r := h.sendMessages(testGroup, msgs); len(r) != 0 {
			t.Fatalf("reports %v for a peer with room", r)
		}
	})
	if allocs != 0 {
		t.Errorf("sendMessages allocates %.1f times per Ready of one message, want 0", allocs)
	}
	h.tr.mu.Lock()
	p := h.tr.peers[2]
	h.tr.mu.Unlock()
	if q, data := p.queued.Load(), int64(len(p.q))*16*128; q < data {
		t.Errorf("%d B counted for %d queued messages, less than the %d B of entry data they carry", q, len(p.q), data)
	}
}
