package store

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// A session record keeps its owner (version 2), and a version 1 record,
// written before owners were kept, still decodes, with none.
func TestSessionRecordOwner(t *testing.T) {
	disc := time.Unix(1700000000, 5)
	subs := []Subscription{{Filter: "a/#", QoS: 1, RetainAsPublished: true, SubscriptionID: 7}}
	for _, s := range []*Session{
		{ClientID: "c1", Owner: "crd_1", ExpiryInterval: 60, DisconnectedAt: disc, Cursor: 9, Subscriptions: subs},
		{ClientID: "c2", ExpiryInterval: 60, DisconnectedAt: disc, Cursor: 9, Subscriptions: subs},
	} {
		b := appendSession(nil, s)
		wantVer := sessionVersionOwner
		if s.Owner == "" {
			wantVer = sessionVersion
		}
		if b[0] != wantVer {
			t.Errorf("%s: version byte %d, want %d", s.ClientID, b[0], wantVer)
		}
		got, err := decodeSession(s.ClientID, b)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(s, got); d != "" {
			t.Errorf("%s: round trip (-want +got):\n%s", s.ClientID, d)
		}
	}

	// A version 1 record as written before this change, byte by byte.
	var v1 []byte
	v1 = append(v1, 1)
	v1 = binary.BigEndian.AppendUint32(v1, 60)
	v1 = binary.BigEndian.AppendUint64(v1, uint64(disc.UnixNano()))
	v1 = binary.BigEndian.AppendUint64(v1, 9)
	v1 = binary.BigEndian.AppendUint16(v1, 1)
	v1 = appendString16(v1, "a/#")
	v1 = append(v1, 1, 2, 0)
	v1 = binary.BigEndian.AppendUint32(v1, 7)
	got, err := decodeSession("old", v1)
	if err != nil {
		t.Fatal(err)
	}
	want := &Session{ClientID: "old", ExpiryInterval: 60, DisconnectedAt: disc, Cursor: 9, Subscriptions: subs}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("version 1 record (-want +got):\n%s", d)
	}
	if _, err := decodeSession("bad", []byte{3}); err == nil {
		t.Error("version 3 record decoded")
	}
}
