package shard

import (
	"errors"
	"testing"

	"berth.dev/broker/packet"
)

func TestAdminPublish(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{}, ConnInfo{})
	c := v5Client(t, b, "admin-sub")
	c.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("api/#"), QoS: 1})
	tests := []struct {
		name    string
		topic   string
		wantErr error
		wantN   int
	}{
		{"delivered", "api/x", nil, 1},
		{"no subscriber", "other", nil, 0},
		{"wildcard", "api/+", ErrInvalidTopic, 0},
		{"$SYS", "$SYS/x", ErrInvalidTopic, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, err := b.shard.Publish(tc.topic, []byte("from http"), 1, false,
				packet.Properties{UserProperties: []packet.UserProperty{{Key: []byte("via"), Value: []byte("api")}}})
			if !errors.Is(err, tc.wantErr) || n != tc.wantN {
				t.Fatalf("Publish = %d, %v; want %d, %v", n, err, tc.wantN, tc.wantErr)
			}
		})
	}
	p := c.publish()
	if string(p.Topic) != "api/x" || string(p.Payload) != "from http" || len(p.Props.UserProperties) != 1 {
		t.Fatalf("got %+v", p)
	}
}

func TestAdminKick(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{}, ConnInfo{})
	c := dialRaw(t, b.addr, packet.Version5)
	c.connect(sessionConnect("kicked", 300, true))
	c.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("k"), QoS: 1})
	if err := b.shard.Kick("kicked", false); err != nil {
		t.Fatal(err)
	}
	c.expectDisconnect(packet.ErrAdministrativeAction)
	if st, ok := b.shard.SessionStats("kicked"); !ok || st.Subscriptions != 1 {
		t.Fatalf("kept session: %+v %v", st, ok)
	}
	if err := b.shard.Kick("kicked", true); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.shard.SessionStats("kicked"); ok {
		t.Fatal("session not discarded")
	}
	if err := b.shard.Kick("kicked", true); !errors.Is(err, ErrNoSession) {
		t.Fatalf("kick of a missing session: %v", err)
	}
}
