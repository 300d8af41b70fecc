package shard

import (
	"context"
	"testing"
	"time"

	"berth.dev/broker/internal/replica"
	"berth.dev/broker/internal/store"
	"berth.dev/broker/internal/tenantlog"
	"berth.dev/broker/internal/wal"
	"berth.dev/broker/packet"
)

// replicatedStore is a tenant store replicated by a group of three nodes in
// this process (real TCP between them, fsync always on the raft logs); it
// returns the leader's store and Log, serving, and every replica's store.
func replicatedStore(t testing.TB) (*store.WAL, *tenantlog.Log, []*store.WAL) {
	t.Helper()
	r := replicatedSync(t, wal.SyncAlways)
	return r.leader, r.log, r.stores
}

// replicated is what replicatedSync sets up.
type replicated struct {
	leader *store.WAL     // the leader's store
	log    *tenantlog.Log // the leader's Log, serving
	stores []*store.WAL   // every replica's store
	hosts  []*replica.Host
	group  *replica.Group // the leader's group
}

// replicatedSync is replicatedStore with the raft logs' fsync policy.
func replicatedSync(t testing.TB, policy wal.Policy) replicated {
	t.Helper()
	secret := []byte("bench-secret-0123456789")
	var hosts []*replica.Host
	var logs []*tenantlog.Log
	var stores []*store.WAL
	for id := uint64(1); id <= 3; id++ {
		h, err := replica.New(replica.Config{NodeID: id, Listen: "127.0.0.1:0", Secret: secret, Dir: t.TempDir(),
			Fsync: policy, Quiesce: true}) // production timing: 100 ms tick
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = h.Close() })
		hosts = append(hosts, h)
		st := openWALStore(t, t.TempDir(), wal.SyncNever) // the raft log is the durable copy
		stores = append(stores, st)
		logs = append(logs, tenantlog.New(st, tenantlog.Options{}))
	}
	for i, h := range hosts {
		for j, p := range hosts {
			if i != j {
				h.AddPeer(uint64(j+1), p.Addr())
			}
		}
	}
	var groups []*replica.Group
	for i, h := range hosts {
		g, err := h.OpenGroup(1, []uint64{1, 2, 3}, logs[i])
		if err != nil {
			t.Fatal(err)
		}
		groups = append(groups, g)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		for i, g := range groups {
			if g.Leader() == uint64(i+1) {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				err := logs[i].Lead(ctx, g)
				cancel()
				if err == nil {
					t.Cleanup(logs[i].Stop)
					return replicated{leader: stores[i], log: logs[i], stores: stores, hosts: hosts, group: g}
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no leader within 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// BenchmarkReplicatedPublish is BenchmarkDurablePublish/always with the
// message log replicated on three nodes (R3): a PUBACK leaves once its
// record is on the disk of two of the three (raft log, fsync always) and
// applied on the leader. cpu-ns/msg is this process's CPU (the three
// nodes, the broker and the client) per message.
func BenchmarkReplicatedPublish(b *testing.B) { benchReplicatedPublish(b, wal.SyncAlways) }

// BenchmarkReplicatedPublishInterval is BenchmarkReplicatedPublish with the
// raft logs fsynced every 100 ms (a node's default -fsync interval, what
// make bench-repl runs): no fsync wait, so the cost per message is the
// replication path's own.
func BenchmarkReplicatedPublishInterval(b *testing.B) { benchReplicatedPublish(b, wal.SyncInterval) }

// BenchmarkReplicatedPublishOne publishes one QoS 1 message at a time and
// waits for its PUBACK (raft logs fsynced every 100 ms): one message per
// entry, so what it measures is the fixed cost of an entry (Readys, frames,
// wake-ups, allocations), what a tenant at a low rate pays per message.
func BenchmarkReplicatedPublishOne(b *testing.B) { benchReplicatedPublishN(b, wal.SyncInterval, 1) }

func benchReplicatedPublish(b *testing.B, policy wal.Policy) {
	benchReplicatedPublishN(b, policy, 256)
}

func benchReplicatedPublishN(b *testing.B, policy wal.Policy, batch int) {
	r := replicatedSync(b, policy)
	st, l := r.leader, r.log
	br := startBrokerWith(b, New(Options{Store: st, MessageLog: st.Messages(), Replication: l, SysInterval: -1, CheckpointInterval: 20 * time.Millisecond}))
	pub := v5Client(b, br, "bench-pub")
	var buf []byte
	for i := range batch {
		buf, _ = (&packet.Publish{QoS: 1, PacketID: uint16(i + 1), Topic: []byte("dur/x"), Payload: make([]byte, 128)}).Append(buf, packet.Version5)
	}
	b.ReportAllocs()
	b.SetBytes(int64(batch) * 128)
	frames := func() (n uint64) {
		for _, h := range r.hosts {
			n += h.Stats().FramesOut
		}
		return n
	}
	cpu, f0, e0 := processCPU(), frames(), r.group.Applied()
	for b.Loop() {
		pub.sendBytes(buf)
		for range batch {
			pub.ack(packet.TypePuback)
		}
	}
	cpu = processCPU() - cpu
	msgs := float64(b.N) * float64(batch)
	b.ReportMetric(msgs/b.Elapsed().Seconds(), "msgs/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/msgs, "cpu-ns/msg")
	b.ReportMetric(msgs/float64(r.group.Applied()-e0), "msgs/entry")
	b.ReportMetric(float64(frames()-f0)/msgs*1000, "frames/kmsg")
}

// TestReplicatedShardAcksAfterCommit: a shard on a replicated store
// acknowledges a QoS 1 message only once it is in the leader's log (written
// there only by the apply of a committed entry), and every replica's log
// ends up with the same records at the same offsets.
func TestReplicatedShardAcksAfterCommit(t *testing.T) {
	t.Parallel()
	st, l, all := replicatedStore(t)
	br := startBrokerWith(t, New(Options{Store: st, MessageLog: st.Messages(), Replication: l, SysInterval: -1, CheckpointInterval: 20 * time.Millisecond}))
	pub := v5Client(t, br, "pub")
	for i := range 20 {
		pub.send(&packet.Publish{QoS: 1, PacketID: uint16(i + 1), Topic: []byte("r/x"), Payload: []byte{byte(i)}})
		pub.ack(packet.TypePuback)
		// Acknowledged: committed, so in the leader's log.
		if got := st.Messages().NextOffset(); got != uint64(i+1) {
			t.Fatalf("after PUBACK %d the leader's log holds %d records", i+1, got)
		}
	}
	for _, rs := range all {
		eventually(t, "every replica holds the 20 records", func() bool { return rs.Messages().NextOffset() == 20 })
		r, err := rs.Messages().ReadFrom(0)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 20 {
			rec, err := r.Next()
			if err != nil || rec.Offset != uint64(i) || len(rec.Payload) != 1 || rec.Payload[0] != byte(i) {
				t.Fatalf("replica record %d: offset %d payload %v (%v)", i, rec.Offset, rec.Payload, err)
			}
		}
		r.Close()
	}
}
