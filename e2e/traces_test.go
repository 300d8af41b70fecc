package e2e

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"berth.dev/e2e/internal/stack"
)

// A device that sends a sampled W3C traceparent in CONNECT and PUBLISH
// gets one trace: the gateway's connect spans and the node's mqtt.publish
// with its children, under the device's trace id, from
// GET /v1/tenants/{tid}/traces/{trace_id}.
func TestConnectAndPublishSpansShareTheDevicesTrace(t *testing.T) {
	t.Parallel()
	s := stack.New(t, bins, stack.Options{Gateways: 1})
	a := s.Signup(t)
	c := s.CreateCredential(t, a, []string{"#"}, []string{"#"}, nil)
	gw := s.Gateways[0].MQTT
	sub := mustConnectV5(t, gw, c, "tr-sub")
	sub.subscribe(t, "tr/#")

	const traceID = "5af7183fc1d1b9a2e3c4d5e6f7a8b9c0"
	tp := paho.UserProperties{{Key: "traceparent", Value: "00-" + traceID + "-a1b2c3d4e5f60718-01"}}
	conn, err := net.Dial("tcp", gw)
	if err != nil {
		t.Fatal(err)
	}
	pub := paho.NewClient(paho.ClientConfig{Conn: conn})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ack, err := pub.Connect(ctx, &paho.Connect{
		ClientID: "tr-pub", KeepAlive: 30, CleanStart: true,
		Username: c.Username, UsernameFlag: true, Password: []byte(c.Password), PasswordFlag: true,
		Properties: &paho.ConnectProperties{User: tp},
	})
	if err != nil || ack.ReasonCode != 0 {
		t.Fatalf("connect: %v %v", ack, err)
	}
	t.Cleanup(func() { _ = pub.Disconnect(&paho.Disconnect{}) })
	if _, err := pub.Publish(ctx, &paho.Publish{Topic: "tr/x", QoS: 1, Payload: []byte("traced"),
		Properties: &paho.PublishProperties{User: tp}}); err != nil {
		t.Fatalf("publish: %v", err)
	}
	sub.expect(t, "tr/x=traced")

	type span struct {
		SpanID       string          `json:"span_id"`
		ParentSpanID *string         `json:"parent_span_id"`
		Name         string          `json:"name"`
		Attributes   json.RawMessage `json:"attributes"`
	}
	var got struct {
		TraceID string `json:"trace_id"`
		Spans   []span `json:"spans"`
	}
	want := []string{"gateway.connect", "mqtt.publish", "acl", "quota", "wal.append", "route", "deliver"}
	deadline := time.Now().Add(30 * time.Second) // spans are written in batches, each second
	for {
		got.Spans = nil
		code := s.Do(t, "GET", "/v1/tenants/"+a.Tenant.ID+"/traces/"+traceID, a.APIKey, nil, &got)
		names := map[string]span{}
		for _, sp := range got.Spans {
			names[sp.Name] = sp
		}
		missing := ""
		for _, n := range want {
			if _, ok := names[n]; !ok {
				missing = n
				break
			}
		}
		if code == http.StatusOK && missing == "" {
			root := names["mqtt.publish"]
			if root.ParentSpanID == nil || *root.ParentSpanID != "a1b2c3d4e5f60718" {
				t.Fatalf("mqtt.publish parent %v, want the device's span", root.ParentSpanID)
			}
			for _, n := range want[2:] {
				if p := names[n].ParentSpanID; p == nil || *p != root.SpanID {
					t.Errorf("%s: parent %v, want mqtt.publish %s", n, p, root.SpanID)
				}
			}
			var attrs map[string]any
			if err := json.Unmarshal(names["route"].Attributes, &attrs); err != nil || attrs["matched_subscribers"] != float64(1) ||
				attrs["client_id"] != "tr-pub" || attrs["topic"] != "tr/x" {
				t.Errorf("route attributes %s", names["route"].Attributes)
			}
			if err := json.Unmarshal(names["deliver"].Attributes, &attrs); err != nil || attrs["subscriber"] != "tr-sub" || attrs["acked"] != true {
				t.Errorf("deliver attributes %s", names["deliver"].Attributes)
			}
			t.Logf("%d spans in trace %s", len(got.Spans), traceID)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace %s: status %d, %d spans, %q missing", traceID, code, len(got.Spans), missing)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
