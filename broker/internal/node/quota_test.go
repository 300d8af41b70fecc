package node

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"berth.dev/broker/packet"
)

// setQuota changes one quota the way the API does (UPDATE + NOTIFY) and
// waits until the node has applied it. The listener may attach after the
// first NOTIFY, so the change is announced again until it lands.
func (n *testNode) setQuota(t *testing.T, tenant, column string, v int64) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := n.pool.Exec(ctx, fmt.Sprintf(`UPDATE quotas SET %s = $1 WHERE tenant_id = $2`, column), v, tenant); err != nil {
			t.Fatal(err)
		}
		if _, err := n.pool.Exec(ctx, `SELECT pg_notify('berth_quotas', $1)`, tenant); err != nil {
			t.Fatal(err)
		}
		tn, ok := n.lookup(tenant)
		if ok && quotaValue(tn, column) == v {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("quota %s=%d never applied", column, v)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func quotaValue(t *tenant, column string) int64 {
	l := t.limits
	switch column {
	case "client_msgs_per_sec":
		return l.clientMsgs.Load()
	case "max_message_size":
		return l.maxMsgSize.Load()
	case "max_subscriptions":
		return l.maxSubs.Load()
	case "max_retained_messages":
		return l.maxRetained.Load()
	case "monthly_messages":
		return l.monthly.Load()
	case "max_inflight":
		inflight, _ := t.sh.Limits()
		return int64(inflight)
	case "max_queued_bytes":
		_, queued := t.sh.Limits()
		return int64(queued)
	case "max_sessions":
		sessions, _ := t.sh.SessionCaps()
		return int64(sessions)
	case "max_session_expiry":
		_, expiry := t.sh.SessionCaps()
		return int64(expiry)
	case "max_connections":
		return l.maxConns.Load()
	}
	panic("unknown quota " + column)
}

func publishQoS1(t *testing.T, cl *paho.Client, topic string, payload []byte, retain bool) (byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := cl.Publish(ctx, &paho.Publish{Topic: topic, QoS: 1, Payload: payload, Retain: retain})
	if r != nil {
		return r.ReasonCode, nil
	}
	return 0, err
}

// Every quota changes live, on a connection that stays up, and refuses
// with the protocol's own reason code.
func TestQuotasAreEnforcedAndChangeLive(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	cl := n.mqtt5(t, cred{"ten_a", "crd_a", allowAll, 0}, "q", nil)

	t.Run("client message rate: PUBACK 0x97", func(t *testing.T) {
		n.setQuota(t, "ten_a", "client_msgs_per_sec", 5)
		refused := 0
		for i := range 20 {
			rc, err := publishQoS1(t, cl, "rate/x", []byte{byte(i)}, false)
			if err != nil {
				t.Fatal(err)
			}
			if rc == byte(packet.ErrQuotaExceeded) {
				refused++
			} else if rc >= 0x80 {
				t.Fatalf("publish %d: reason %#x", i, rc)
			}
		}
		if refused < 10 {
			t.Fatalf("%d of 20 publishes over a 5/s quota refused, want most", refused)
		}
		n.setQuota(t, "ten_a", "client_msgs_per_sec", 1000) // raised live: the same connection publishes again
		// setQuota returns once the tenant holds the new rate; the node then
		// sets it on each live connection's bucket, so allow that a moment.
		deadline := time.Now().Add(2 * time.Second)
		for {
			rc, err := publishQoS1(t, cl, "rate/x", []byte("ok"), false)
			if err != nil {
				t.Fatal(err)
			}
			if rc < 0x80 {
				break
			}
			if rc != byte(packet.ErrQuotaExceeded) || time.Now().After(deadline) {
				t.Fatalf("after raising the quota: reason %#x", rc)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})

	t.Run("subscriptions per client: SUBACK 0x97", func(t *testing.T) {
		n.setQuota(t, "ten_a", "max_subscriptions", 2)
		subscribe(t, cl, "s/1")
		subscribe(t, cl, "s/2")
		if rc := subscribe(t, cl, "s/3"); rc != byte(packet.ErrQuotaExceeded) {
			t.Fatalf("third subscription: reason %#x, want 0x97", rc)
		}
	})

	t.Run("retained messages: PUBACK 0x97", func(t *testing.T) {
		n.setQuota(t, "ten_a", "max_retained_messages", 1)
		if rc, err := publishQoS1(t, cl, "r/1", []byte("kept"), true); err != nil || rc >= 0x80 {
			t.Fatalf("first retained: reason %#x, %v", rc, err)
		}
		if rc, _ := publishQoS1(t, cl, "r/2", []byte("over"), true); rc != byte(packet.ErrQuotaExceeded) {
			t.Fatalf("second retained: reason %#x, want 0x97", rc)
		}
		if rc, _ := publishQoS1(t, cl, "r/1", []byte("replaced"), true); rc >= 0x80 {
			t.Fatalf("replacing the retained message: reason %#x", rc)
		}
	})

	t.Run("monthly messages: PUBACK 0x97", func(t *testing.T) {
		n.setQuota(t, "ten_a", "monthly_messages", 1) // already used up this month
		if rc, _ := publishQoS1(t, cl, "m/x", []byte("x"), false); rc != byte(packet.ErrQuotaExceeded) {
			t.Fatalf("over the monthly quota: reason %#x, want 0x97", rc)
		}
		n.setQuota(t, "ten_a", "monthly_messages", 1_000_000)
	})

	t.Run("message size: DISCONNECT 0x95", func(t *testing.T) {
		n.setQuota(t, "ten_a", "max_message_size", 100)
		conn := n.dial(t, cred{"ten_a", "crd_a", allowAll, 0}, nil)
		raw := rawConnect(t, conn, "big")
		b, _ := (&packet.Publish{Topic: []byte("big"), QoS: 0, Payload: make([]byte, 200)}).Append(nil, packet.Version5)
		conn.Write(b)
		expectDisconnect(t, raw, packet.ErrPacketTooLarge)
	})
}

// rawConn is what the raw-packet tests need of a connection.
type rawConn interface {
	io.ReadWriter
	SetReadDeadline(time.Time) error
}

// sendConnect writes cp (in its own protocol version) and reads the
// CONNACK, returning the reader for what follows and the decoded CONNACK.
func sendConnect(t *testing.T, conn rawConn, cp *packet.Connect) (*packet.Reader, packet.Connack) {
	t.Helper()
	if cp.ProtocolName == nil {
		cp.ProtocolName = []byte("MQTT")
	}
	b, err := cp.Append(nil, cp.Version)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(b); err != nil {
		t.Fatal(err)
	}
	r := packet.NewReader(conn, 256)
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	fh, body, err := r.ReadPacket(0)
	if err != nil || fh.Type != packet.TypeConnack {
		t.Fatalf("want CONNACK, got %v %v", fh.Type, err)
	}
	var ack packet.Connack
	if err := ack.Decode(cp.Version, fh, body); err != nil {
		t.Fatalf("decoding CONNACK: %v", err)
	}
	return r, ack
}

// rawConnect sends an MQTT 5 CONNECT with clean start and reads the CONNACK.
func rawConnect(t *testing.T, conn rawConn, id string) *packet.Reader {
	t.Helper()
	r, _ := sendConnect(t, conn, &packet.Connect{Version: packet.Version5, CleanStart: true, KeepAlive: 30, ClientID: []byte(id)})
	return r
}

// writePacket writes one MQTT 5 packet to conn.
func writePacket(t *testing.T, conn io.Writer, p interface {
	Append([]byte, byte) ([]byte, error)
}) {
	t.Helper()
	b, err := p.Append(nil, packet.Version5)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(b); err != nil {
		t.Fatal(err)
	}
}

func expectDisconnect(t *testing.T, r *packet.Reader, want packet.ReasonCode) {
	t.Helper()
	for {
		fh, body, err := r.ReadPacket(0)
		if err != nil {
			t.Fatalf("want DISCONNECT %#x, got %v", byte(want), err)
		}
		if fh.Type != packet.TypeDisconnect {
			continue
		}
		var d packet.Disconnect
		if err := d.Decode(packet.Version5, fh, body); err != nil || d.Reason != want {
			t.Fatalf("DISCONNECT reason %#x (%v), want %#x", byte(d.Reason), err, byte(want))
		}
		return
	}
}

// A 3.1.1 client cannot be refused: over its rate it is slowed down, and
// nothing it sends is lost.
func TestMQTT311PublishersAreThrottledNotDropped(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	got := make(chan string, 100)
	sub := n.mqtt5(t, cred{"ten_a", "crd_a", allowAll, 0}, "sub", got)
	subscribe(t, sub, "slow/#")
	// Open the tenant's limits before lowering the rate.
	n.setQuota(t, "ten_a", "client_msgs_per_sec", 10)

	conn := n.dial(t, cred{"ten_a", "crd_a", allowAll, 0}, nil)
	sendConnect(t, conn, &packet.Connect{Version: packet.Version311, CleanStart: true, KeepAlive: 30, ClientID: []byte("v3")})
	start := time.Now()
	var burst []byte
	for i := range 30 {
		burst, _ = (&packet.Publish{Topic: []byte("slow/x"), Payload: []byte(fmt.Sprint(i))}).Append(burst, packet.Version311)
	}
	conn.Write(burst)
	for i := range 30 {
		expectMsg(t, got, fmt.Sprintf("slow/x=%d", i))
	}
	// 30 messages at 10/s with a burst of 10: about 2 s.
	if took := time.Since(start); took < time.Second {
		t.Fatalf("30 messages over a 10/s quota arrived in %v: not throttled", took)
	}
}

func adminDo(t *testing.T, n *testNode, method, path, body string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+n.AdminAddr().String()+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func TestAdminAPI(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	got := make(chan string, 10)
	sub := n.mqtt5(t, cred{"ten_a", "crd_a", allowAll, 0}, "watcher", got)
	subscribe(t, sub, "admin/#")

	code, _ := adminDo(t, n, "POST", "/admin/tenants/ten_a/publish", `{"topic":"admin/hello","payload":"from http","qos":1,"retain":true}`)
	if code != http.StatusAccepted {
		t.Fatalf("publish: status %d", code)
	}
	expectMsg(t, got, "admin/hello=from http")
	if code, _ := adminDo(t, n, "POST", "/admin/tenants/ten_a/publish", `{"topic":"admin/+","payload":"x"}`); code != http.StatusBadRequest {
		t.Fatalf("publish to a wildcard topic: status %d, want 400", code)
	}
	n.setQuota(t, "ten_a", "max_message_size", 10)
	if code, _ := adminDo(t, n, "POST", "/admin/tenants/ten_a/publish", `{"topic":"admin/big","payload_base64":"`+base64.StdEncoding.EncodeToString(make([]byte, 11))+`"}`); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("publish over the size quota: status %d, want 413", code)
	}

	var sessions struct {
		Sessions []struct {
			ClientID    string     `json:"client_id"`
			Connected   bool       `json:"connected"`
			ConnectedAt *time.Time `json:"connected_at"`
		} `json:"sessions"`
	}
	code, body := adminDo(t, n, "GET", "/admin/tenants/ten_a/sessions", "")
	if err := json.Unmarshal(body, &sessions); err != nil || code != 200 || len(sessions.Sessions) != 1 || sessions.Sessions[0].ClientID != "watcher" || !sessions.Sessions[0].Connected {
		t.Fatalf("sessions: %d %s", code, body)
	}
	if at := sessions.Sessions[0].ConnectedAt; at == nil || time.Since(*at) > time.Minute || time.Since(*at) < 0 {
		t.Fatalf("connected_at of a session connected just now: %s", body)
	}

	var topics struct {
		Topics []struct {
			Topic       string `json:"topic"`
			Messages    uint64 `json:"messages"`
			Subscribers int    `json:"subscribers"`
		} `json:"topics"`
	}
	pub := n.mqtt5(t, cred{"ten_a", "crd_a", allowAll, 0}, "pub", nil)
	publish(t, pub, "admin/t", "1")
	publish(t, pub, "admin/t", "2")
	code, body = adminDo(t, n, "GET", "/admin/tenants/ten_a/topics", "")
	if err := json.Unmarshal(body, &topics); err != nil || code != 200 || len(topics.Topics) == 0 || topics.Topics[0].Topic != "admin/t" || topics.Topics[0].Messages != 2 || topics.Topics[0].Subscribers != 1 {
		t.Fatalf("topics: %d %s", code, body)
	}

	var retained struct {
		Retained []struct {
			Topic   string `json:"topic"`
			Payload []byte `json:"payload_base64"`
		} `json:"retained"`
	}
	code, body = adminDo(t, n, "GET", "/admin/tenants/ten_a/retained?filter=admin/%23", "")
	if err := json.Unmarshal(body, &retained); err != nil || code != 200 || len(retained.Retained) != 1 || string(retained.Retained[0].Payload) != "from http" {
		t.Fatalf("retained: %d %s", code, body)
	}
	if code, body = adminDo(t, n, "DELETE", "/admin/tenants/ten_a/retained?filter=admin/%23", ""); code != 200 || !strings.Contains(string(body), `"deleted":1`) {
		t.Fatalf("delete retained: %d %s", code, body)
	}
	if code, body = adminDo(t, n, "GET", "/admin/tenants/ten_a/retained", ""); code != 200 || !strings.Contains(string(body), `"retained":[]`) {
		t.Fatalf("retained after delete: %d %s", code, body)
	}

	if code, _ := adminDo(t, n, "DELETE", "/admin/tenants/ten_a/sessions/watcher", ""); code != http.StatusNoContent {
		t.Fatalf("kick: status %d", code)
	}
	if code, _ := adminDo(t, n, "DELETE", "/admin/tenants/ten_a/sessions/nobody", ""); code != http.StatusNotFound {
		t.Fatalf("kick unknown: status %d, want 404", code)
	}
	if code, _ := adminDo(t, n, "GET", "/admin/tenants/ten_zzz/sessions", ""); code != http.StatusNotFound {
		t.Fatalf("unknown tenant: status %d, want 404", code)
	}
}

// max_inflight changes the outbound window of a connection that stays up.
func TestInflightQuotaChangesLive(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	conn := n.dial(t, cred{"ten_a", "crd_a", allowAll, 0}, nil)
	r := rawConnect(t, conn, "slow-acker")
	b, _ := (&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: []byte("w/#"), QoS: 1}}}).Append(nil, packet.Version5)
	conn.Write(b)
	next := func() packet.Type {
		t.Helper()
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		fh, _, err := r.ReadPacket(0)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		return fh.Type
	}
	if ty := next(); ty != packet.TypeSuback {
		t.Fatalf("got %v, want SUBACK", ty)
	}
	silence := func() {
		t.Helper()
		conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		if fh, _, err := r.ReadPacket(0); err == nil {
			t.Fatalf("unexpected %v beyond the window", fh.Type)
		}
	}
	n.setQuota(t, "ten_a", "max_inflight", 2)
	pub := n.mqtt5(t, cred{"ten_a", "crd_a", allowAll, 0}, "pub", nil)
	for i := range 4 {
		publish(t, pub, "w/x", fmt.Sprint(i))
	}
	for range 2 {
		if ty := next(); ty != packet.TypePublish {
			t.Fatalf("got %v, want PUBLISH", ty)
		}
	}
	silence() // two unacknowledged: the window is full
	n.setQuota(t, "ten_a", "max_inflight", 4)
	for range 2 {
		if ty := next(); ty != packet.TypePublish {
			t.Fatalf("got %v, want PUBLISH after widening the window", ty)
		}
	}
}

// A QoS 1 message refused by a quota lands in the tenant's dead-letter
// topic, and only there: the other tenant sees nothing.
func TestRefusedMessagesAreDeadLettered(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	got, other := make(chan string, 100), make(chan string, 100)
	// '#' in an ACL does not reach '$' topics: the credential names them.
	dlqACL := `{"pub":["#"],"sub":["#","$berth/dlq/#"]}`
	watcher := n.mqtt5(t, cred{"ten_a", "crd_w", dlqACL, 0}, "watcher", got)
	if rc := subscribe(t, watcher, "$berth/dlq/#"); rc != 1 {
		t.Fatalf("subscribe $berth/dlq/#: reason %#x", rc)
	}
	foreign := n.mqtt5(t, cred{"ten_b", "crd_b", dlqACL, 0}, "foreign", other)
	if rc := subscribe(t, foreign, "$berth/dlq/#"); rc != 1 {
		t.Fatalf("subscribe $berth/dlq/#: reason %#x", rc)
	}
	n.setQuota(t, "ten_a", "client_msgs_per_sec", 1)
	pub := n.mqtt5(t, cred{"ten_a", "crd_a", allowAll, 0}, "pub", nil)
	refused := ""
	for i := range 10 {
		rc, err := publishQoS1(t, pub, "rate/x", []byte(fmt.Sprint(i)), false)
		if err != nil {
			t.Fatal(err)
		}
		if rc == byte(packet.ErrQuotaExceeded) {
			refused = fmt.Sprint(i)
			break
		}
	}
	if refused == "" {
		t.Fatal("no publish refused over a 1/s quota")
	}
	expectMsg(t, got, "$berth/dlq/quota_exceeded="+refused)
	expectNone(t, other, 200*time.Millisecond)
}
