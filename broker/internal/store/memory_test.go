package store

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestMemory(t *testing.T) {
	m := NewMemory()
	msg := &Message{Topic: "a/b", Payload: []byte("x"), QoS: 1, Created: time.Unix(1, 0)}
	if err := m.SetRetained(msg); err != nil {
		t.Fatal(err)
	}
	if err := m.SetRetained(&Message{Topic: "a/c", Payload: []byte("y")}); err != nil {
		t.Fatal(err)
	}
	if err := m.DeleteRetained("a/c"); err != nil {
		t.Fatal(err)
	}
	var got []*Message
	if err := m.Retained(func(r *Message) bool { got = append(got, r); return true }); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]*Message{msg}, got); diff != "" {
		t.Fatalf("retained (-want +got):\n%s", diff)
	}

	sess := &Session{ClientID: "c1", ExpiryInterval: 60, Subscriptions: []Subscription{{Filter: "a/#", QoS: 1, SubscriptionID: 3}}}
	tests := []struct {
		name string
		op   func() error
		want []*Session
	}{
		{"save", func() error { return m.SaveSession(sess) }, []*Session{sess}},
		{"delete", func() error { return m.DeleteSession("c1") }, nil},
		{"delete missing", func() error { return m.DeleteSession("nope") }, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.op(); err != nil {
				t.Fatal(err)
			}
			var all []*Session
			if err := m.Sessions(func(s *Session) bool { all = append(all, s); return true }); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, all); diff != "" {
				t.Fatalf("sessions (-want +got):\n%s", diff)
			}
		})
	}

	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.SetRetained(msg); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
	if err := m.Sessions(func(*Session) bool { return true }); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}
