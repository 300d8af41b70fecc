package node

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	mqtt "github.com/eclipse/paho.mqtt.golang"

	"berth.dev/broker/internal/topicrule"
	"berth.dev/broker/packet"
	"berth.dev/testenv"
)

// putRule writes a topic rule as the API does (INSERT or UPDATE, then
// NOTIFY berth_topic_rules in the same transaction) and waits until the
// tenant's open shard enforces it. The listener may attach after the
// first NOTIFY, so the change is announced again until it lands.
func (n *testNode) putRule(t *testing.T, tenant string, r topicrule.Rule) {
	t.Helper()
	var retention, size, rate *int64
	if r.HasRetention {
		s := int64(r.Retention / time.Second)
		retention = &s
	}
	if r.MaxMessageSize > 0 {
		size = &r.MaxMessageSize
	}
	if r.MaxMsgsPerSec > 0 {
		rate = &r.MaxMsgsPerSec
	}
	n.changeRules(t, tenant, `INSERT INTO topic_rules (id, tenant_id, filter, retention_seconds, retained_allowed, max_message_size, max_msgs_per_sec)
		VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (id) DO UPDATE SET filter = $3, retention_seconds = $4,
		retained_allowed = $5, max_message_size = $6, max_msgs_per_sec = $7`,
		[]any{r.ID, tenant, r.Filter, retention, r.RetainedAllowed, size, rate}, func(rs *topicrule.Set) bool {
			for _, got := range rs.Rules() {
				if got.ID == r.ID {
					return got.Filter == r.Filter && got.HasRetention == r.HasRetention && got.Retention == r.Retention &&
						got.RetainedAllowed == r.RetainedAllowed && got.MaxMessageSize == r.MaxMessageSize && got.MaxMsgsPerSec == r.MaxMsgsPerSec
				}
			}
			return false
		})
}

// deleteRule deletes a rule as the API does and waits until the shard
// no longer enforces it.
func (n *testNode) deleteRule(t *testing.T, tenant, id string) {
	t.Helper()
	n.changeRules(t, tenant, `DELETE FROM topic_rules WHERE id = $1`, []any{id}, func(rs *topicrule.Set) bool {
		for _, r := range rs.Rules() {
			if r.ID == id {
				return false
			}
		}
		return true
	})
}

func (n *testNode) changeRules(t *testing.T, tenant, sql string, args []any, applied func(*topicrule.Set) bool) {
	t.Helper()
	ctx := context.Background()
	tn, ok := n.lookup(tenant)
	if !ok {
		t.Fatalf("tenant %s is not open", tenant)
	}
	tx, err := n.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, sql, args...); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT pg_notify('berth_topic_rules', $1)`, tenant); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !applied(tn.sh.TopicRules()) {
		if time.Now().After(deadline) {
			t.Fatal("topic rule change never applied")
		}
		time.Sleep(50 * time.Millisecond)
		if _, err := n.pool.Exec(ctx, `SELECT pg_notify('berth_topic_rules', $1)`, tenant); err != nil {
			t.Fatal(err)
		}
	}
}

// ruleConn is a raw MQTT 5 client connection, to see the exact packets a
// refusal sends.
type ruleConn struct {
	t    *testing.T
	conn net.Conn
	r    *packet.Reader
	id   uint16
}

func (n *testNode) ruleConn(t *testing.T, clientID string) *ruleConn {
	t.Helper()
	conn := n.dial(t, cred{"ten_a", "crd_a", allowAll, 0}, nil)
	return &ruleConn{t: t, conn: conn, r: rawConnect(t, conn, clientID)}
}

// publish sends a PUBLISH and returns what answers it: PUBACK (QoS 1)
// with its reason, PINGRESP (QoS 0: a PINGREQ follows it, so the
// connection is known to be up) or DISCONNECT with its reason.
func (c *ruleConn) publish(topic string, size int, qos byte, retain bool) (packet.Type, packet.ReasonCode) {
	c.t.Helper()
	p := packet.Publish{Topic: []byte(topic), QoS: qos, Retain: retain, Payload: []byte(strings.Repeat("x", size))}
	if qos > 0 {
		c.id++
		p.PacketID = c.id
	}
	b, err := p.Append(nil, packet.Version5)
	if err != nil {
		c.t.Fatal(err)
	}
	if qos == 0 {
		b, _ = (&packet.Ping{Type: packet.TypePingreq}).Append(b, packet.Version5)
	}
	if _, err := c.conn.Write(b); err != nil {
		c.t.Fatal(err)
	}
	c.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		fh, body, err := c.r.ReadPacket(0)
		if err != nil {
			c.t.Fatalf("publish %s: no answer: %v", topic, err)
		}
		switch fh.Type {
		case packet.TypePuback:
			var a packet.Ack
			if err := a.Decode(packet.Version5, fh, body); err != nil {
				c.t.Fatal(err)
			}
			return fh.Type, a.Reason
		case packet.TypePingresp:
			return fh.Type, 0
		case packet.TypeDisconnect:
			var d packet.Disconnect
			if err := d.Decode(packet.Version5, fh, body); err != nil {
				c.t.Fatal(err)
			}
			return fh.Type, d.Reason
		}
	}
}

func (c *ruleConn) expect(topic string, size int, qos byte, retain bool, wantType packet.Type, wantReason packet.ReasonCode) {
	c.t.Helper()
	if ty, rc := c.publish(topic, size, qos, retain); ty != wantType || rc != wantReason {
		c.t.Fatalf("publish %s (%d bytes, QoS %d, retain %v): %v %#x, want %v %#x", topic, size, qos, retain, ty, byte(rc), wantType, byte(wantReason))
	}
}

func retainedTopics(t *testing.T, n *testNode, filter string) []string {
	t.Helper()
	code, body := adminDo(t, n, "GET", "/admin/tenants/ten_a/retained?filter="+url.QueryEscape(filter), "")
	var out struct {
		Retained []struct {
			Topic string `json:"topic"`
		} `json:"retained"`
	}
	if err := json.Unmarshal(body, &out); code != 200 || err != nil {
		t.Fatalf("retained: %d %s %v", code, body, err)
	}
	var topics []string
	for _, r := range out.Retained {
		topics = append(topics, r.Topic)
	}
	return topics
}

func drops(t *testing.T, n *testNode, reason string) uint64 {
	t.Helper()
	tn, ok := n.lookup("ten_a")
	if !ok {
		t.Fatal("tenant not open")
	}
	return tn.sh.Stats().Dropped[reason]
}

// A rule's size limit and retained flag act on a connection that was up
// before the rule existed, and stop acting when the rule is deleted, with
// no reconnect: over the size DISCONNECT 0x95 (as over the tenant's size
// quota), RETAIN DISCONNECT 0x9A at any QoS; other topics, plain messages
// and clearing a retained message pass.
func TestTopicRuleSizeAndRetainApplyLive(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	live := n.ruleConn(t, "live")
	live.expect("lim/a", 200, 1, true, packet.TypePuback, packet.CodeNoMatchingSubscribers) // before the rule
	// kept stays up across the rule's whole life.
	kept := n.ruleConn(t, "kept")

	n.putRule(t, "ten_a", topicrule.Rule{ID: "top_lim", Filter: "lim/#", MaxMessageSize: 100, RetainedAllowed: false})
	live.expect("lim/a", 50, 1, false, packet.TypePuback, packet.CodeNoMatchingSubscribers)
	live.expect("other/x", 200, 1, true, packet.TypePuback, packet.CodeNoMatchingSubscribers)
	if got := retainedTopics(t, n, "lim/#"); len(got) != 1 {
		t.Fatalf("retained before the rule: %v (a rule does not delete them)", got)
	}
	live.expect("lim/a", 0, 1, true, packet.TypePuback, packet.CodeNoMatchingSubscribers) // clearing is allowed
	if got := retainedTopics(t, n, "lim/#"); len(got) != 0 {
		t.Fatalf("retained after clearing: %v", got)
	}
	before := drops(t, n, "retain_refused")
	live.expect("lim/a", 50, 1, true, packet.TypeDisconnect, packet.ErrRetainNotSupported)
	n.ruleConn(t, "qos0").expect("lim/b", 50, 0, true, packet.TypeDisconnect, packet.ErrRetainNotSupported)
	if d := drops(t, n, "retain_refused") - before; d != 2 {
		t.Fatalf("retain_refused counted %d, want 2", d)
	}
	if got := retainedTopics(t, n, "lim/#"); len(got) != 0 {
		t.Fatalf("a refused retained message was stored: %v", got)
	}
	n.ruleConn(t, "big").expect("lim/a", 101, 1, false, packet.TypeDisconnect, packet.ErrPacketTooLarge)
	n.ruleConn(t, "big0").expect("lim/deep/er", 101, 0, false, packet.TypeDisconnect, packet.ErrPacketTooLarge)

	n.deleteRule(t, "ten_a", "top_lim")
	kept.expect("lim/a", 200, 1, true, packet.TypePuback, packet.CodeNoMatchingSubscribers)
	if got := retainedTopics(t, n, "lim/#"); len(got) != 1 {
		t.Fatalf("retained after the rule went: %v", got)
	}
}

// The effective size limit is the smaller of the rule's and the tenant's
// max_message_size quota.
func TestTopicRuleSizeIsBoundedByTheQuota(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	c := n.ruleConn(t, "c")
	n.setQuota(t, "ten_a", "max_message_size", 1000)
	n.putRule(t, "ten_a", topicrule.Rule{ID: "top_big", Filter: "big/#", MaxMessageSize: 5000, RetainedAllowed: true})
	c.expect("big/a", 900, 1, false, packet.TypePuback, packet.CodeNoMatchingSubscribers)
	c.expect("big/a", 1001, 1, false, packet.TypeDisconnect, packet.ErrPacketTooLarge)
}

// newPaho3 connects a paho.mqtt.golang (MQTT 3.1.1) client as ten_a.
func (n *testNode) newPaho3(t *testing.T, clientID string) mqtt.Client {
	t.Helper()
	conn := n.dial(t, cred{"ten_a", "crd_a", allowAll, 0}, nil)
	o := mqtt.NewClientOptions().AddBroker("tcp://127.0.0.1:7883").SetClientID(clientID).SetCleanSession(true).
		SetProtocolVersion(4).SetAutoReconnect(false).SetConnectRetry(false).SetConnectTimeout(5 * time.Second).
		SetCustomOpenConnectionFn(func(*url.URL, mqtt.ClientOptions) (net.Conn, error) { return conn, nil })
	cl := mqtt.NewClient(o)
	if tok := cl.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect %s: %v", clientID, tok.Error())
	}
	t.Cleanup(func() { cl.Disconnect(50) })
	return cl
}

func wait311(t *testing.T, tok mqtt.Token) {
	t.Helper()
	if !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("token: %v", tok.Error())
	}
}

// MQTT 3.1.1 cannot be refused: a retained message where the rule allows
// none is delivered without RETAIN, not stored, and counted; a retained
// will there is kept as a plain one.
func TestTopicRuleRetainMQTT311(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	got := make(chan string, 10)
	sub := n.mqtt5(t, cred{"ten_a", "crd_a", allowAll, 0}, "sub", got)
	subscribe(t, sub, "noret/#")
	n.putRule(t, "ten_a", topicrule.Rule{ID: "top_noret", Filter: "noret/#", RetainedAllowed: false})

	pub := n.newPaho3(t, "v3")
	wait311(t, pub.Publish("noret/x", 1, true, "v3"))
	expectMsg(t, got, "noret/x=v3")
	if d := drops(t, n, "retain_refused"); d != 1 {
		t.Fatalf("retain_refused = %d, want 1", d)
	}
	if r := retainedTopics(t, n, "noret/#"); len(r) != 0 {
		t.Fatalf("stored as retained: %v", r)
	}
	late := make(chan string, 10)
	subscribe(t, n.mqtt5(t, cred{"ten_a", "crd_a", allowAll, 0}, "late", late), "noret/#")
	expectNone(t, late, 300*time.Millisecond)

	// A 3.1.1 retained will on such a topic: accepted, then sent plain.
	conn := n.dial(t, cred{"ten_a", "crd_a", allowAll, 0}, nil)
	_, ack := sendConnect(t, conn, &packet.Connect{Version: packet.Version311, CleanStart: true, KeepAlive: 30, ClientID: []byte("w3"),
		WillFlag: true, WillQoS: 1, WillRetain: true, WillTopic: []byte("noret/will"), WillPayload: []byte("gone")})
	if ack.Reason != packet.CodeSuccess {
		t.Fatalf("CONNACK %v", ack.Reason)
	}
	conn.Close() // no DISCONNECT: the will is due
	expectMsg(t, got, "noret/will=gone")
	if r := retainedTopics(t, n, "noret/#"); len(r) != 0 {
		t.Fatalf("will stored as retained: %v", r)
	}
}

// MQTT 5 wills: CONNACK 0x9A for a retained will where the rule allows
// none, 0x95 for one over the rule's size.
func TestTopicRuleWillAtConnect(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	n.ruleConn(t, "opener") // opens the tenant
	n.putRule(t, "ten_a", topicrule.Rule{ID: "top_w", Filter: "w/#", MaxMessageSize: 10, RetainedAllowed: false})
	for _, tc := range []struct {
		name    string
		retain  bool
		payload string
		want    packet.ReasonCode
	}{
		{"retained", true, "bye", packet.ErrRetainNotSupported},
		{"too large", false, "far too long a will", packet.ErrPacketTooLarge},
		{"plain", false, "bye", packet.CodeSuccess},
	} {
		conn := n.dial(t, cred{"ten_a", "crd_a", allowAll, 0}, nil)
		_, ack := sendConnect(t, conn, &packet.Connect{Version: packet.Version5, CleanStart: true, KeepAlive: 30, ClientID: []byte("w-" + tc.name),
			WillFlag: true, WillRetain: tc.retain, WillTopic: []byte("w/x"), WillPayload: []byte(tc.payload)})
		if ack.Reason != tc.want {
			t.Errorf("%s will: CONNACK %#x, want %#x", tc.name, byte(ack.Reason), byte(tc.want))
		}
	}
}

// A rule's rate is shared by every connection of the tenant on the node:
// over it an MQTT 5 publisher gets PUBACK 0x97 for that message (QoS 0:
// dropped) and stays connected; an MQTT 3.1.1 one is slowed, never
// dropped. Deleting the rule lifts it on the same connections.
func TestTopicRuleRateIsSharedAndLive(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	got, dead := make(chan string, 100), make(chan string, 100)
	sub := n.mqtt5(t, cred{"ten_a", "crd_a", allowAll, 0}, "sub", got)
	subscribe(t, sub, "rate/#")
	watcher := n.mqtt5(t, cred{"ten_a", "crd_w", `{"pub":[],"sub":["$berth/dlq/#"]}`, 0}, "watcher", dead)
	subscribe(t, watcher, "$berth/dlq/topic_rate")
	a := n.ruleConn(t, "a")
	b := n.ruleConn(t, "b")
	n.putRule(t, "ten_a", topicrule.Rule{ID: "top_rate", Filter: "rate/#", MaxMsgsPerSec: 1, RetainedAllowed: true})

	before := drops(t, n, "topic_rate")
	accepted, refused := 0, 0
	for i := range 8 {
		c := a
		if i%2 == 1 {
			c = b
		}
		switch ty, rc := c.publish(fmt.Sprintf("rate/%d", i%3), 1, 1, false); {
		case ty == packet.TypePuback && rc == packet.CodeSuccess:
			accepted++
		case ty == packet.TypePuback && rc == packet.ErrQuotaExceeded:
			refused++
		default:
			t.Fatalf("publish %d: %v %#x", i, ty, byte(rc))
		}
	}
	if accepted < 1 || refused < 4 {
		t.Fatalf("over a 1/s rule shared by two connections: %d accepted, %d refused", accepted, refused)
	}
	a.expect("rate/x", 1, 0, false, packet.TypePingresp, 0) // QoS 0 over the rate: dropped, still connected
	for range accepted {
		select {
		case <-got:
		case <-time.After(5 * time.Second):
			t.Fatal("an accepted message was not delivered")
		}
	}
	a.expect("free/x", 1, 1, false, packet.TypePuback, packet.CodeNoMatchingSubscribers) // other topics are not limited
	if d := drops(t, n, "topic_rate") - before; d < uint64(refused) {
		t.Fatalf("topic_rate counted %d, want at least %d", d, refused)
	}
	for range refused { // each refused QoS 1 message is dead-lettered
		select {
		case m := <-dead:
			if !strings.HasPrefix(m, "$berth/dlq/topic_rate=") {
				t.Fatalf("dead letter %q", m)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a refused message was not dead-lettered")
		}
	}

	// MQTT 3.1.1: every message arrives (reads are paused instead).
	drained := drops(t, n, "topic_rate")
	expectNoneOrDrain(got)
	v3 := n.newPaho3(t, "v3")
	for i := range 3 {
		wait311(t, v3.Publish("rate/v3", 1, false, fmt.Sprint(i)))
	}
	for i := range 3 {
		expectMsg(t, got, fmt.Sprintf("rate/v3=%d", i))
	}
	if d := drops(t, n, "topic_rate"); d != drained {
		t.Fatalf("a 3.1.1 publisher's messages were dropped: topic_rate %d → %d", drained, d)
	}

	n.deleteRule(t, "ten_a", "top_rate")
	for range 5 {
		a.expect("rate/x", 1, 1, false, packet.TypePuback, packet.CodeSuccess)
	}
}

// expectNoneOrDrain empties got of what is already there.
func expectNoneOrDrain(got chan string) {
	for {
		select {
		case <-got:
		default:
			return
		}
	}
}

// The most specific matching rule governs a topic, whatever order the
// rules were created in (docs/topic-rules.md), on the device path and
// the HTTP path alike.
func TestTopicRulePrecedence(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	n.ruleConn(t, "opener")
	for _, r := range []topicrule.Rule{
		{ID: "top_exact", Filter: "p/exact/ok", RetainedAllowed: false},
		{ID: "top_all", Filter: "p/#", RetainedAllowed: false},
		{ID: "top_plus", Filter: "p/+/ok", RetainedAllowed: true},
		{ID: "top_hash", Filter: "p/x/#", RetainedAllowed: false},
	} {
		n.putRule(t, "ten_a", r)
	}
	for _, tc := range []struct {
		topic string
		rule  string
		ok    bool
	}{
		{"p/x/ok", "top_plus", true},       // p/+/ok and p/x/# have 2 literal levels: no '#' first
		{"p/exact/ok", "top_exact", false}, // exact beats p/+/ok
		{"p/y", "top_all", false},          // only p/# matches
		{"p/x/ok/deeper", "top_hash", false},
		{"p/y/ok", "top_plus", true},
	} {
		want, wantRC := packet.TypePuback, packet.CodeNoMatchingSubscribers
		if !tc.ok {
			want, wantRC = packet.TypeDisconnect, packet.ErrRetainNotSupported
		}
		n.ruleConn(t, "dev").expect(tc.topic, 10, 1, true, want, wantRC)

		status, body := adminDo(t, n, "POST", "/admin/tenants/ten_a/publish", fmt.Sprintf(`{"topic":%q,"payload":"x","retain":true}`, tc.topic))
		wantStatus := http.StatusAccepted
		if !tc.ok {
			wantStatus = http.StatusUnprocessableEntity
		}
		if status != wantStatus || (!tc.ok && !strings.Contains(string(body), tc.rule)) {
			t.Errorf("HTTP publish retained to %s: %d %s, want %d naming %s", tc.topic, status, body, wantStatus, tc.rule)
		}
	}
}

// HTTP publish passes the rules too: 413 over the size, 422 for RETAIN,
// 429 over the rate, each naming the rule.
func TestTopicRuleHTTPPublish(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	n.ruleConn(t, "opener")
	n.putRule(t, "ten_a", topicrule.Rule{ID: "top_h", Filter: "h/#", MaxMessageSize: 5, MaxMsgsPerSec: 1, RetainedAllowed: false})
	for _, tc := range []struct {
		body   string
		status int
	}{
		{`{"topic":"h/a","payload":"too long"}`, http.StatusRequestEntityTooLarge},
		{`{"topic":"h/a","payload":"x","retain":true}`, http.StatusUnprocessableEntity},
		{`{"topic":"h/a","payload":"x"}`, http.StatusAccepted},
		{`{"topic":"h/a","payload":"x"}`, http.StatusTooManyRequests},
	} {
		status, body := adminDo(t, n, "POST", "/admin/tenants/ten_a/publish", tc.body)
		var out struct{ Error, Quota, Rule string }
		_ = json.Unmarshal(body, &out)
		if status != tc.status || (status != http.StatusAccepted && (out.Rule != "top_h" || out.Quota != "topic_rule" || !strings.Contains(out.Error, "top_h"))) {
			t.Fatalf("%s: %d %s, want %d naming top_h", tc.body, status, body, tc.status)
		}
	}
}

// A rule's retention: an offline session resuming does not get the
// messages on its topics older than the retention (counted as
// "retention" drops), but gets newer ones and those on other topics; a
// replay (berth-replay-from) skips them as well.
func TestTopicRuleRetention(t *testing.T) {
	t.Parallel()
	n := startNodeWith(t, testenv.DatabaseURL(t), t.TempDir(), true)
	c := cred{"ten_a", "crd_a", allowAll, 0}
	got := make(chan string, 20)
	expiry := uint32(3600)
	keeper := func(clean bool) *paho.Client {
		t.Helper()
		cl := newRulePaho5(n.dial(t, c, nil), got)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ack, err := cl.Connect(ctx, &paho.Connect{ClientID: "keeper", KeepAlive: 30, CleanStart: clean, Username: c.id, UsernameFlag: true,
			Properties: &paho.ConnectProperties{SessionExpiryInterval: &expiry}})
		if err != nil || ack.ReasonCode != 0 {
			t.Fatalf("connect keeper: %v %v", ack, err)
		}
		return cl
	}
	k := keeper(true)
	subscribe(t, k, "old/#")
	subscribe(t, k, "fresh/#")
	_ = k.Disconnect(&paho.Disconnect{})
	tn, _ := n.lookup("ten_a")
	poll(t, 10*time.Second, "keeper offline", func() bool {
		ss, ok := tn.sh.SessionStats("keeper")
		return ok && !ss.Connected
	})
	const retention = 3 * time.Second
	n.putRule(t, "ten_a", topicrule.Rule{ID: "top_old", Filter: "old/#", HasRetention: true, Retention: retention, RetainedAllowed: true})

	pub := n.mqtt5(t, c, "pub", nil)
	publish(t, pub, "old/a", "early")
	publish(t, pub, "fresh/a", "early")
	past := time.Now().Add(retention + 200*time.Millisecond)
	for time.Now().Before(past) { // the early messages age past the rule's retention
		time.Sleep(50 * time.Millisecond)
	}
	publish(t, pub, "old/a", "late")
	before := tn.sh.Stats().Dropped["retention"]

	k = keeper(false)
	t.Cleanup(func() { _ = k.Disconnect(&paho.Disconnect{}) })
	received := map[string]bool{}
	for range 2 {
		select {
		case m := <-got:
			received[m] = true
		case <-time.After(5 * time.Second):
			t.Fatalf("resumed session received only %v", received)
		}
	}
	if !received["fresh/a=early"] || !received["old/a=late"] {
		t.Fatalf("resumed session received %v, want fresh/a=early and old/a=late", received)
	}
	expectNone(t, got, 300*time.Millisecond)
	if d := tn.sh.Stats().Dropped["retention"] - before; d != 1 {
		t.Fatalf("retention drops %d, want 1 (old/a=early)", d)
	}

	// A replay from the start of the log skips what the rule no longer keeps.
	replayed := make(chan string, 20)
	r := n.mqtt5(t, c, "replayer", replayed)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := r.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "old/#", QoS: 1}, {Topic: "fresh/#", QoS: 1}},
		Properties: &paho.SubscribeProperties{User: paho.UserProperties{{Key: "berth-replay-from", Value: "0"}}}}); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"fresh/a=early": true, "old/a=late": true}
	for range 2 {
		select {
		case m := <-replayed:
			if !want[m] {
				t.Fatalf("replayed %q", m)
			}
			delete(want, m)
		case <-time.After(5 * time.Second):
			t.Fatalf("replay missing %v", want)
		}
	}
	expectNone(t, replayed, 300*time.Millisecond)
}

func newRulePaho5(conn net.Conn, got chan<- string) *paho.Client {
	return paho.NewClient(paho.ClientConfig{Conn: conn,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(p paho.PublishReceived) (bool, error) {
			got <- p.Packet.Topic + "=" + string(p.Packet.Payload)
			return true, nil
		}},
	})
}
