package store

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"berth.dev/broker/internal/wal"
	"berth.dev/broker/packet"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func openTestWAL(t *testing.T, dir string) *WAL {
	t.Helper()
	w, err := OpenWAL(WALOptions{Dir: dir, Fsync: wal.SyncAlways, SegmentBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w
}

func allRetained(t *testing.T, w *WAL) map[string]*Message {
	t.Helper()
	got := map[string]*Message{}
	if err := w.Retained(func(m *Message) bool { got[m.Topic] = m; return true }); err != nil {
		t.Fatal(err)
	}
	return got
}

func allSessions(t *testing.T, w *WAL) map[string]*Session {
	t.Helper()
	got := map[string]*Session{}
	if err := w.Sessions(func(s *Session) bool { got[s.ClientID] = s; return true }); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestWALSurvivesReopen: retained messages (newest per topic, an empty
// payload deleting) and sessions (newest per client id) come back after
// the store is closed and opened again, which also compacts the logs.
func TestWALSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	w := openTestWAL(t, dir)
	created := time.Unix(100, 0)
	props := packet.Properties{ContentType: []byte("text/plain"), UserProperties: []packet.UserProperty{{Key: []byte("k"), Value: []byte("v")}}}
	props.Has.Set(packet.PropContentType)
	props.Has.Set(packet.PropUserProperty)
	keep := &Message{Topic: "a/b", Payload: []byte("second"), QoS: 1, Props: props, Created: created, ExpiresAt: created.Add(time.Hour)}
	ops := []func() error{
		func() error { return w.SetRetained(&Message{Topic: "a/b", Payload: []byte("first"), Created: created}) },
		func() error { return w.SetRetained(keep) },
		func() error { return w.SetRetained(&Message{Topic: "gone", Payload: []byte("x"), Created: created}) },
		func() error { return w.DeleteRetained("gone") },
		func() error { return w.SaveSession(&Session{ClientID: "c1", ExpiryInterval: 1}) },
		func() error {
			return w.SaveSession(&Session{ClientID: "c1", ExpiryInterval: 60, Cursor: 42, DisconnectedAt: created,
				Subscriptions: []Subscription{{Filter: "x/#", QoS: 2, NoLocal: true, RetainHandling: 1, SubscriptionID: 9}}})
		},
		func() error { return w.SaveSession(&Session{ClientID: "c2"}) },
		func() error { return w.DeleteSession("c2") },
	}
	// Many overwrites so the keyed logs roll and compaction has work.
	for range 50 {
		ops = append(ops, func() error {
			return w.SetRetained(&Message{Topic: "churn", Payload: []byte(strings.Repeat("z", 200))})
		})
	}
	ops = append(ops, func() error { return w.DeleteRetained("churn") })
	for i, op := range ops {
		if err := op(); err != nil {
			t.Fatalf("op %d: %v", i, err)
		}
	}
	check := func(t *testing.T, w *WAL) {
		t.Helper()
		wantR := map[string]*Message{"a/b": keep}
		if diff := cmp.Diff(wantR, allRetained(t, w), cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("retained (-want +got):\n%s", diff)
		}
		wantS := map[string]*Session{"c1": {ClientID: "c1", ExpiryInterval: 60, Cursor: 42, DisconnectedAt: created,
			Subscriptions: []Subscription{{Filter: "x/#", QoS: 2, NoLocal: true, RetainHandling: 1, SubscriptionID: 9}}}}
		if diff := cmp.Diff(wantS, allSessions(t, w)); diff != "" {
			t.Fatalf("sessions (-want +got):\n%s", diff)
		}
	}
	check(t, w)
	before := w.retained.Size()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	again := openTestWAL(t, dir)
	check(t, again)
	if after := again.retained.Size(); after >= before {
		t.Fatalf("retained log %d bytes after compaction, %d before", after, before)
	}
	if err := again.Close(); err != nil {
		t.Fatal(err)
	}
	if err := again.SetRetained(keep); err == nil {
		t.Fatal("SetRetained after Close succeeded")
	}
}

// TestTenantDir: tenant ids never become path elements.
func TestTenantDir(t *testing.T) {
	root := "/data"
	for _, id := range []string{"acme", "../../etc", "a/b", "", strings.Repeat("x", 5000)} {
		d := TenantDir(root, id)
		if filepath.Dir(d) != root || len(filepath.Base(d)) != 32 {
			t.Fatalf("TenantDir(%q) = %q: want one 32-hex-digit directory under %s", id, d, root)
		}
	}
	if TenantDir(root, "a") == TenantDir(root, "b") {
		t.Fatal("two tenants share a directory")
	}
	base := t.TempDir()
	w, err := OpenTenant(base, "../../escape", WALOptions{Fsync: wal.SyncNever})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, sub := range []string{dirMessages, dirRetained, dirSessions} {
		if fi, err := os.Stat(filepath.Join(TenantDir(base, "../../escape"), sub)); err != nil || !fi.IsDir() {
			t.Fatalf("%s: %v", sub, err)
		}
	}
}

// TestMetaRoundTrip: message metadata decodes to what was encoded.
func TestMetaRoundTrip(t *testing.T) {
	props := packet.Properties{PayloadFormat: 1, MessageExpiry: 30, ResponseTopic: []byte("r"), CorrelationData: []byte{0, 1},
		UserProperties: []packet.UserProperty{{Key: []byte("a"), Value: []byte("b")}, {Key: []byte("a"), Value: []byte("c")}}}
	props.Has.Set(packet.PropPayloadFormat)
	props.Has.Set(packet.PropMessageExpiry)
	props.Has.Set(packet.PropResponseTopic)
	props.Has.Set(packet.PropCorrelationData)
	tests := []struct {
		name string
		want Meta
	}{
		{"bare", Meta{Topic: []byte("t"), QoS: 1, Created: 5}},
		{"props", Meta{Topic: []byte("a/b/c"), QoS: 2, Retain: true, Created: 7, Expires: 9, Props: props}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := AppendMeta(nil, tc.want.Topic, tc.want.QoS, tc.want.Retain, tc.want.Created, tc.want.Expires, &tc.want.Props)
			want := tc.want
			if len(want.Props.UserProperties) > 0 {
				want.Props.Has.Set(packet.PropUserProperty)
			}
			var got Meta
			n, err := DecodeMeta(b, &got)
			if err != nil || n != len(b) {
				t.Fatalf("decode: %d of %d bytes, %v", n, len(b), err)
			}
			if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Fatalf("(-want +got):\n%s", diff)
			}
			if _, err := DecodeMeta(b[:len(b)-1], &got); err == nil {
				t.Fatal("truncated meta decoded")
			}
		})
	}
}
