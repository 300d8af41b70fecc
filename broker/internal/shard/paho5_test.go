package shard

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

// paho5 connects a paho.golang (MQTT 5) client; received publishes go to
// the returned channel.
func paho5(t *testing.T, b *testBroker, cp *paho.Connect) (*paho.Client, <-chan *paho.Publish) {
	t.Helper()
	nc, err := net.Dial("tcp", b.addr)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *paho.Publish, 100)
	c := paho.NewClient(paho.ClientConfig{
		Conn: nc,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){
			func(pr paho.PublishReceived) (bool, error) { got <- pr.Packet; return true, nil },
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ack, err := c.Connect(ctx, cp)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	if ack.ReasonCode != 0 {
		t.Fatalf("CONNACK %#x", ack.ReasonCode)
	}
	t.Cleanup(func() { _ = c.Disconnect(&paho.Disconnect{}) })
	return c, got
}

func TestPahoV5RequestResponse(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{}, ConnInfo{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	server, reqs := paho5(t, b, &paho.Connect{ClientID: "responder", CleanStart: true, KeepAlive: 30})
	if _, err := server.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "svc/req", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	client, resps := paho5(t, b, &paho.Connect{ClientID: "requester", CleanStart: true, KeepAlive: 30})
	sid := 7
	sa, err := client.Subscribe(ctx, &paho.Subscribe{
		Properties:    &paho.SubscribeProperties{SubscriptionIdentifier: &sid},
		Subscriptions: []paho.SubscribeOptions{{Topic: "svc/resp/requester", QoS: 2}},
	})
	if err != nil || sa.Reasons[0] != 2 {
		t.Fatalf("subscribe: %v %v", err, sa)
	}
	pf := byte(1)
	exp := uint32(60)
	resp, err := client.Publish(ctx, &paho.Publish{
		Topic: "svc/req", QoS: 1, Payload: []byte(`{"q":1}`),
		Properties: &paho.PublishProperties{
			ResponseTopic: "svc/resp/requester", CorrelationData: []byte("corr-1"), ContentType: "application/json",
			PayloadFormat: &pf, MessageExpiry: &exp,
			User: paho.UserProperties{{Key: "traceparent", Value: "00-abc-def-01"}, {Key: "a", Value: "1"}, {Key: "a", Value: "2"}},
		},
	})
	if err != nil || resp.ReasonCode != 0 {
		t.Fatalf("publish: %v %+v", err, resp)
	}
	var req *paho.Publish
	select {
	case req = <-reqs:
	case <-ctx.Done():
		t.Fatal("request not delivered")
	}
	p := req.Properties
	// [MQTT-3.3.2-15..20] passed through unaltered, user properties in order.
	if p.ResponseTopic != "svc/resp/requester" || string(p.CorrelationData) != "corr-1" || p.ContentType != "application/json" ||
		p.PayloadFormat == nil || *p.PayloadFormat != 1 || p.MessageExpiry == nil || *p.MessageExpiry > 60 ||
		len(p.User) != 3 || p.User[0].Key != "traceparent" || p.User[1].Value != "1" || p.User[2].Value != "2" {
		t.Fatalf("request properties %+v", p)
	}
	if _, err := server.Publish(ctx, &paho.Publish{Topic: p.ResponseTopic, QoS: 2, Payload: []byte("answer"),
		Properties: &paho.PublishProperties{CorrelationData: p.CorrelationData}}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-resps:
		if string(r.Payload) != "answer" || string(r.Properties.CorrelationData) != "corr-1" ||
			r.Properties.SubscriptionIdentifier == nil || *r.Properties.SubscriptionIdentifier != 7 {
			t.Fatalf("response %+v", r)
		}
	case <-ctx.Done():
		t.Fatal("response not delivered")
	}
}

func TestPahoV5NoMatchingSubscribers(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{}, ConnInfo{})
	c, _ := paho5(t, b, &paho.Connect{ClientID: "lonely", CleanStart: true})
	resp, err := c.Publish(t.Context(), &paho.Publish{Topic: "nobody/home", QoS: 1, Payload: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	if resp.ReasonCode != 0x10 {
		t.Fatalf("PUBACK %#x, want 0x10 no matching subscribers", resp.ReasonCode)
	}
	ua, err := c.Unsubscribe(t.Context(), &paho.Unsubscribe{Topics: []string{"never/subscribed"}})
	if err != nil || len(ua.Reasons) != 1 || ua.Reasons[0] != 0x11 {
		t.Fatalf("UNSUBACK %v %v", ua, err)
	}
}

func TestPahoV5SessionResume(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{}, ConnInfo{})
	expiry := uint32(300)
	cp := &paho.Connect{ClientID: "p5resume", CleanStart: true, Properties: &paho.ConnectProperties{SessionExpiryInterval: &expiry}}
	c, _ := paho5(t, b, cp)
	if _, err := c.Subscribe(t.Context(), &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "resume/#", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	_ = c.Disconnect(&paho.Disconnect{})
	eventually(t, "offline", func() bool { st, ok := b.shard.SessionStats("p5resume"); return ok && !st.Connected })
	pub, _ := paho5(t, b, &paho.Connect{ClientID: "p5resume-pub", CleanStart: true})
	if _, err := pub.Publish(t.Context(), &paho.Publish{Topic: "resume/x", QoS: 1, Payload: []byte("kept")}); err != nil {
		t.Fatal(err)
	}
	cp.CleanStart = false
	_, got := paho5(t, b, cp)
	select {
	case p := <-got:
		if string(p.Payload) != "kept" {
			t.Fatalf("got %q", p.Payload)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("queued message not delivered on resume")
	}
}
