package e2e

import (
	"bytes"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	mqtt3 "github.com/eclipse/paho.mqtt.golang"

	"berth.dev/e2e/internal/stack"
)

// Payloads say whose they are, so a watcher can tell a leak from its own
// tenant's traffic.
const (
	victimMark   = "victim:"
	attackerMark = "attacker:"
)

// TestAttackMQTT attacks through the gateway (MQTT 5 with paho.golang for
// the reason codes, MQTT 3.1.1 with paho.mqtt.golang), with a victim
// tenant and an attacker tenant on one node. Each attack is refused with
// its reason code, and nothing leaks: the victim's '#' watcher never sees
// the attacker's payloads, the attacker's subscriptions never see the
// victim's, and refused wills and retained messages are never published.
// Each check of "nothing arrived" reads up to a marker published after
// the attack, never a timeout.
func TestAttackMQTT(t *testing.T) {
	t.Parallel()
	cert, key := writeCert(t)
	s := stack.New(t, bins, stack.Options{TLSCert: cert, TLSKey: key, TenantDomain: "mqtt.localhost"})
	gw := s.Gateways[0].MQTT
	v, x := s.Signup(t), s.Signup(t) // victim, attacker: two accounts
	vc := s.CreateCredential(t, v, []string{"#"}, []string{"#"}, nil)
	xc := s.CreateCredential(t, x, []string{"dev/#"}, []string{"dev/#"}, nil) // the attacker's device
	xAll := s.CreateCredential(t, x, []string{"#"}, []string{"#"}, nil)       // the attacker's widest
	// What '#' cannot show: $SYS and dead letters, named in the ACL.
	xDollar := s.CreateCredential(t, x, nil, []string{"$SYS/#", "$berth/#", "dev/#"}, nil)
	// The attacker's own tenant gets small caps, so the size and retained
	// attacks are short; one PUT, so one NOTIFY brings both to the node.
	if code := s.Do(t, "PUT", "/v1/tenants/"+x.Tenant.ID+"/quotas", x.APIKey,
		map[string]int64{"max_message_size": 1024, "max_retained_messages": 10}, nil); code != http.StatusOK {
		t.Fatalf("attacker quotas: status %d", code)
	}

	vWatch := mustDialV5(t, gw, vc, "victim-watch")
	vWatch.subscribe(t, "#")
	xWatch := mustDialV5(t, gw, xAll, "attacker-watch")
	xWatch.subscribe(t, "#")
	xDollarWatch := mustDialV5(t, gw, xDollar, "attacker-dollar-watch")
	for _, f := range []string{"$SYS/#", "$berth/#", "dev/#"} {
		xDollarWatch.subscribe(t, f)
	}
	vPub := mustDialV5(t, gw, vc, "victim-pub")
	xDev := mustDialV5(t, gw, xc, "attacker-dev")
	if rc := vPub.publishCode(t, "victim/keep", victimMark+"keep", true); rc != 0 {
		t.Fatalf("victim's retained message: PUBACK %#x", rc)
	}
	vWatch.expect(t, "victim/keep="+victimMark+"keep")

	// settle proves that nothing crossed over up to now: the victim's
	// watcher reads to a fresh marker of its tenant without an attacker's
	// payload, the attacker's to one of its own without a victim's (or a
	// $SYS topic, which '#' never matches [MQTT-4.7.2-1]), nor extra.
	markers := 0
	settle := func(t *testing.T, extra ...string) {
		t.Helper()
		markers++
		vm, xm := fmt.Sprintf("victim/marker/%d", markers), fmt.Sprintf("dev/marker/%d", markers)
		if rc := vPub.publishCode(t, vm, victimMark+"marker", false); rc != 0 {
			t.Fatalf("victim marker: PUBACK %#x", rc)
		}
		vWatch.noneUntil(t, vm+"="+victimMark+"marker", attackerMark)
		if rc := xDev.publishCode(t, xm, attackerMark+"marker", false); rc != 0 {
			t.Fatalf("attacker marker: PUBACK %#x", rc)
		}
		xWatch.noneUntil(t, xm+"="+attackerMark+"marker", append([]string{victimMark, "$SYS"}, extra...)...)
		// Nothing the attacker sent reached $SYS or the dead letters but
		// what the flood's refusals put there ($berth/dlq/quota_exceeded).
		xDollarWatch.noneUntil(t, xm+"="+attackerMark+"marker", victimMark, attackerMark+"will", attackerMark+"retained")
	}

	t.Run("another tenant's token on this tenant's endpoint", func(t *testing.T) {
		tlsAddr := s.Gateways[0].TLS
		if _, ack := dialV5(t, tlsAddr, v.Tenant.Slug+".mqtt.localhost", xAll, "victim-dev", nil); ack.ReasonCode != 0x87 {
			t.Errorf("attacker's token on the victim's endpoint (SNI): CONNACK %#x, want 0x87", ack.ReasonCode)
		}
		if _, ack := dialV5(t, gw, "", stack.Credential{Username: vc.Username, Password: xAll.Password}, "victim-dev", nil); ack.ReasonCode != 0x86 {
			t.Errorf("attacker's token under the victim's credential id: CONNACK %#x, want 0x86", ack.ReasonCode)
		}
		if _, rc := connectV3(t, gw, stack.Credential{Username: vc.Username, Password: xAll.Password}, "victim-dev"); rc != 4 {
			t.Errorf("the same over 3.1.1: return code %d, want 4", rc)
		}
		settle(t)
	})

	t.Run("a sibling credential's client id", func(t *testing.T) {
		sibling := s.CreateCredential(t, v, []string{"#"}, []string{"#"}, nil)
		owner, ack := dialV5(t, gw, "", vc, "victim-dev", persistent(300))
		if ack.ReasonCode != 0 {
			t.Fatalf("owner: CONNACK %#x", ack.ReasonCode)
		}
		owner.subscribe(t, "victim/dev/#")
		for name, edit := range map[string]func(*paho.Connect){"clean start": nil, "resume": persistent(300)} {
			if _, ack := dialV5(t, gw, "", sibling, "victim-dev", edit); ack.ReasonCode != 0x85 {
				t.Errorf("sibling taking the owner's connected session (%s): CONNACK %#x, want 0x85", name, ack.ReasonCode)
			}
		}
		if _, rc := connectV3With(t, gw, sibling, "victim-dev", func(o *mqtt3.ClientOptions) { o.SetCleanSession(false) }); rc != 2 {
			t.Errorf("sibling over 3.1.1: return code %d, want 2 (identifier rejected)", rc)
		}
		// The same client id in the attacker's tenant is another client.
		if _, ack := dialV5(t, gw, "", xAll, "victim-dev", nil); ack.ReasonCode != 0 {
			t.Errorf("the attacker's own 'victim-dev': CONNACK %#x, want 0x00", ack.ReasonCode)
		}
		if rc := vPub.publishCode(t, "victim/dev/1", victimMark+"live", false); rc != 0 {
			t.Fatalf("PUBACK %#x", rc)
		}
		owner.expect(t, "victim/dev/1="+victimMark+"live")
		vWatch.expect(t, "victim/dev/1="+victimMark+"live")
		select {
		case rc := <-owner.disconnected:
			t.Fatalf("the owner's connection ended (%#x)", rc)
		default:
		}

		// Offline, the session and its queue stay the owner's.
		if err := owner.Disconnect(&paho.Disconnect{}); err != nil {
			t.Fatal(err)
		}
		waitSession(t, s, v, "victim-dev", false)
		if rc := vPub.publishCode(t, "victim/dev/2", victimMark+"queued", false); rc != 0 {
			t.Fatalf("PUBACK %#x", rc)
		}
		vWatch.expect(t, "victim/dev/2="+victimMark+"queued")
		thief, ack := dialV5(t, gw, "", sibling, "victim-dev", persistent(300))
		if ack.ReasonCode != 0x85 {
			t.Errorf("sibling taking the owner's offline session: CONNACK %#x, want 0x85", ack.ReasonCode)
		}
		back, ack := dialV5(t, gw, "", vc, "victim-dev", persistent(300))
		if ack.ReasonCode != 0 || !ack.SessionPresent {
			t.Fatalf("owner resuming: CONNACK %#x, session present %v", ack.ReasonCode, ack.SessionPresent)
		}
		back.expect(t, "victim/dev/2="+victimMark+"queued")
		select {
		case m := <-thief.got:
			t.Errorf("the refused sibling received %q", m)
		default:
		}
		settle(t)
	})

	t.Run("subscriptions beyond the ACL", func(t *testing.T) {
		for _, f := range []string{"#", "+/#", "+", "victim/#", "$share/g/#", "$share/g/victim/#", "$SYS/#", "$SYS/broker/uptime", "$berth/#", "$berth/dlq/#"} {
			if rc := xDev.subscribeCode(t, f); rc != 0x87 {
				t.Errorf("SUBSCRIBE %q with ACL dev/#: SUBACK %#x, want 0x87", f, rc)
			}
		}
		// Even the widest ACL ('#') does not cover '$' topics: $SYS and
		// dead letters must be listed by name (README, "Credentials";
		// [MQTT-4.7.2-1], broker/internal/acl).
		wide := mustConnectV5(t, gw, xAll, "attacker-wide")
		for _, f := range []string{"$SYS/#", "$berth/#", "$berth/dlq/#", "$share/g/$SYS/#"} {
			if rc := wide.subscribeCode(t, f); rc != 0x87 {
				t.Errorf("SUBSCRIBE %q with ACL #: SUBACK %#x, want 0x87", f, rc)
			}
		}
		v3, rc := connectV3(t, gw, xc, "attacker-v3")
		if rc != 0 {
			t.Fatalf("3.1.1 connect: %d", rc)
		}
		for _, f := range []string{"#", "$SYS/#", "$share/g/#"} {
			tok := v3.Subscribe(f, 1, nil)
			if !tok.WaitTimeout(10 * time.Second) {
				t.Fatalf("3.1.1 SUBSCRIBE %q: no SUBACK", f)
			}
			// paho keys the result by the filter without a $share/<group>/
			// prefix: the one entry is this SUBSCRIBE's.
			res := tok.(*mqtt3.SubscribeToken).Result()
			if len(res) != 1 {
				t.Fatalf("3.1.1 SUBSCRIBE %q: results %v", f, res)
			}
			for _, got := range res {
				if got != 0x80 {
					t.Errorf("3.1.1 SUBSCRIBE %q with ACL dev/#: SUBACK %#x, want 0x80", f, got)
				}
			}
		}
		// What the ACL allows is granted, and carries the attacker's own
		// traffic only.
		for _, f := range []string{"dev/#", "$share/g/dev/#"} {
			if rc := xDev.subscribeCode(t, f); rc != 1 {
				t.Errorf("SUBSCRIBE %q with ACL dev/#: SUBACK %#x, want 0x01", f, rc)
			}
		}
		if rc := vPub.publishCode(t, "dev/secret", victimMark+"dev", false); rc != 0 {
			t.Fatalf("PUBACK %#x", rc)
		}
		vWatch.expect(t, "dev/secret="+victimMark+"dev")
		if rc := xDev.publishCode(t, "dev/own", attackerMark+"own", false); rc != 0 {
			t.Fatalf("PUBACK %#x", rc)
		}
		xDev.noneUntil(t, "dev/own="+attackerMark+"own", victimMark)
		xWatch.expect(t, "dev/own="+attackerMark+"own")
		settle(t)
		xDev.drain()
	})

	t.Run("replay from another tenant's offset", func(t *testing.T) {
		for i := range 5 {
			if rc := vPub.publishCode(t, fmt.Sprintf("dev/replay/%d", i), victimMark+"replay", false); rc != 0 {
				t.Fatalf("PUBACK %#x", rc)
			}
			vWatch.expect(t, fmt.Sprintf("dev/replay/%d=%sreplay", i, victimMark))
		}
		if rc := xDev.publishCode(t, "dev/replay/own", attackerMark+"replay", false); rc != 0 {
			t.Fatalf("PUBACK %#x", rc)
		}
		xWatch.expect(t, "dev/replay/own="+attackerMark+"replay")
		for i, from := range []string{"0", "1", "3", "2000-01-01T00:00:00Z"} {
			r := mustConnectV5(t, gw, xc, fmt.Sprintf("attacker-replay-%d", i))
			if rc := r.subscribeCode(t, "dev/#", paho.UserProperty{Key: "berth-replay-from", Value: from}); rc != 1 {
				t.Fatalf("SUBSCRIBE with berth-replay-from %s: SUBACK %#x", from, rc)
			}
			marker := fmt.Sprintf("dev/replay/marker-%d", i)
			if rc := xDev.publishCode(t, marker, attackerMark+"marker", false); rc != 0 {
				t.Fatalf("PUBACK %#x", rc)
			}
			got := r.noneUntil(t, marker+"="+attackerMark+"marker", victimMark)
			// Replay works (from the start of the attacker's own log):
			// the refusal of the victim's messages is not an empty replay.
			if (from == "0" || strings.HasPrefix(from, "2000")) && !slices.Contains(got, "dev/replay/own="+attackerMark+"replay") {
				t.Errorf("replay from %s gave %q, without the attacker's own earlier message", from, got)
			}
		}
		settle(t)
		xDev.drain()
	})

	t.Run("will abuse", func(t *testing.T) {
		for _, tc := range []struct {
			name  string
			cred  stack.Credential
			topic string
		}{
			{"outside the ACL", xc, "victim/will"},
			{"into $SYS", xAll, "$SYS/broker/uptime"},
			{"as a dead letter", xAll, "$berth/dlq/queue_full"},
		} {
			if _, ack := dialV5(t, gw, "", tc.cred, "attacker-will", withWill(tc.topic, []byte(attackerMark+"will"))); ack.ReasonCode != 0x87 {
				t.Errorf("will %s (%s): CONNACK %#x, want 0x87", tc.name, tc.topic, ack.ReasonCode)
			}
		}
		if _, rc := connectV3With(t, gw, xc, "attacker-will-v3", func(o *mqtt3.ClientOptions) {
			o.SetWill("victim/will", attackerMark+"will", 1, false)
		}); rc != 5 {
			t.Errorf("3.1.1 will outside the ACL: return code %d, want 5", rc)
		}
		// Over max_message_size (1024, set above; wait for the node to
		// have it: a CONNECT admitted meanwhile ends with a normal
		// DISCONNECT, which discards its will).
		big := append([]byte(attackerMark+"will"), bytes.Repeat([]byte("x"), 2048)...)
		waitFor(t, 15*time.Second, "the attacker's max_message_size of 1024 on the node", func() bool {
			cl, ack := dialV5(t, gw, "", xc, "attacker-will-big", withWill("dev/will", big))
			if ack.ReasonCode == 0 {
				_ = cl.Disconnect(&paho.Disconnect{})
			}
			if ack.ReasonCode != 0 && ack.ReasonCode != 0x95 {
				t.Fatalf("will over max_message_size: CONNACK %#x, want 0x95", ack.ReasonCode)
			}
			return ack.ReasonCode == 0x95
		})
		if _, rc := connectV3With(t, gw, xc, "attacker-will-big-v3", func(o *mqtt3.ClientOptions) {
			o.SetBinaryWill("dev/will", big, 1, false)
		}); rc != 3 {
			t.Errorf("3.1.1 will over max_message_size: return code %d, want 3", rc)
		}
		settle(t, attackerMark+"will")
	})

	t.Run("retained abuse", func(t *testing.T) {
		victimBefore := retainedTopics(t, s, v)
		if rc := xDev.publishCode(t, "victim/keep", attackerMark+"overwrite", true); rc != 0x87 {
			t.Errorf("retained outside the ACL: PUBACK %#x, want 0x87", rc)
		}
		wide := mustConnectV5(t, gw, xAll, "attacker-retain")
		for _, topic := range []string{"$SYS/broker/uptime", "$berth/dlq/queue_full"} {
			if rc := wide.publishCode(t, topic, attackerMark+"retained", true); rc != 0x87 {
				t.Errorf("retained on %s: PUBACK %#x, want 0x87", topic, rc)
			}
		}
		// A flood of retained messages stops at max_retained_messages (10
		// here), paced under the per-client rate so that only the cap
		// refuses.
		const capRetained, extra = 10, 20
		tick := time.NewTicker(70 * time.Millisecond)
		defer tick.Stop()
		for i := range capRetained + extra {
			<-tick.C
			rc := xDev.publishCode(t, fmt.Sprintf("dev/flood/%d", i), attackerMark+"flood", true)
			want := byte(0x97) // quota exceeded
			if i < capRetained {
				want = 0
			}
			if rc != want {
				t.Fatalf("retained message %d of a flood capped at %d: PUBACK %#x, want %#x", i+1, capRetained, rc, want)
			}
		}
		var flood []string
		for _, topic := range retainedTopics(t, s, x) {
			if strings.HasPrefix(topic, "dev/flood/") {
				flood = append(flood, topic)
			}
		}
		if len(flood) != capRetained {
			t.Errorf("the attacker holds %d flood messages retained, want %d: %v", len(flood), capRetained, flood)
		}
		if after := retainedTopics(t, s, v); !slices.Equal(after, victimBefore) {
			t.Errorf("the victim's retained store changed: %v, was %v", after, victimBefore)
		}
		// The flood's accepted messages reached the attacker's own watcher
		// only; the victim's saw none.
		for i := range capRetained {
			xWatch.expect(t, fmt.Sprintf("dev/flood/%d=%sflood", i, attackerMark))
		}
		settle(t, "dev/flood/") // and none of the refused ones
	})
}

// noneUntil reads what c receives until the message want, failing on any
// message containing one of forbidden before it; it returns everything
// read before want. The marker is the barrier, not a timeout.
func (c *v5) noneUntil(t *testing.T, want string, forbidden ...string) []string {
	t.Helper()
	var got []string
	deadline := time.After(10 * time.Second)
	for {
		select {
		case m := <-c.got:
			if m == want {
				return got
			}
			got = append(got, m)
			for _, f := range forbidden {
				if strings.Contains(m, f) {
					t.Errorf("received %q (it contains %q): it must never be delivered here", m, f)
				}
			}
		case <-deadline:
			t.Fatalf("no %q within 10 s (read %q)", want, got)
		}
	}
}

// drain forgets what c has received so far.
func (c *v5) drain() {
	for {
		select {
		case <-c.got:
		default:
			return
		}
	}
}
