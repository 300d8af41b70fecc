package gateway

import (
	"net/netip"
	"testing"
	"time"
)

// TestCooldown drives a source's failed CONNECTs over a quarter of its
// per-IP rate and burst: it is refused (as cooling) for the cool-down, another
// source is not, and after it the source gets its rate without a fresh
// burst. Failures under the bound never cool a source.
func TestCooldown(t *testing.T) {
	const rate, burst, cool = 20, 40, 30 * time.Second
	a := newAdmission(&Config{PerIPRate: rate, PerIPBurst: burst, AcceptRate: 1e6, AcceptBurst: 1e6, FloodCooldown: cool})
	ip, other := netip.MustParseAddr("192.0.2.7"), netip.MustParseAddr("2001:db8::7")
	src := sourceKey(ip)
	now := time.Unix(1_700_000_000, 0)

	// A quarter of the burst fails at once: still under the bound.
	for i := range burst / 4 {
		if a.failed(src, now) {
			t.Fatalf("failure %d of a burst of %d cooled the source", i+1, burst/4)
		}
	}
	if !a.failed(src, now) {
		t.Fatalf("failure %d at once did not cool the source (bound: a quarter of -per-ip-burst %d)", burst/4+1, burst)
	}
	for _, at := range []time.Duration{0, cool / 2, cool - time.Millisecond} {
		if ok, cooling := a.allowIP(ip, now.Add(at)); ok || !cooling {
			t.Fatalf("%v into the cool-down: allowIP = %v, cooling %v; want refused, cooling", at, ok, cooling)
		}
		if a.failed(src, now.Add(at)) {
			t.Fatal("a failure during the cool-down started another")
		}
	}
	if ok, cooling := a.allowIP(other, now); !ok || cooling {
		t.Fatalf("another source: allowIP = %v, cooling %v", ok, cooling)
	}
	// After it the bucket is empty (no fresh burst of 40): one connect
	// an interval of the rate later, not two.
	after := now.Add(cool)
	if ok, cooling := a.allowIP(ip, after); ok || cooling {
		t.Fatalf("right after the cool-down: allowIP = %v, cooling %v; want over the rate (an empty bucket)", ok, cooling)
	}
	next := after.Add(time.Second / rate)
	if ok, _ := a.allowIP(ip, next); !ok {
		t.Fatal("refused an interval of the rate after the cool-down")
	}
	if ok, _ := a.allowIP(ip, next); ok {
		t.Fatal("two connects within an interval after the cool-down: its burst refilled")
	}

	// Devices retrying a bad token, 4 a second between them, never cool
	// their source; a source failing at its whole rate does, within 1 s.
	slow := sourceKey(netip.MustParseAddr("192.0.2.8"))
	for i := range 2400 {
		if a.failed(slow, now.Add(time.Duration(i)*time.Second/4)) {
			t.Fatalf("4 failures a second cooled the source at failure %d", i+1)
		}
	}
	fast, cooled := sourceKey(netip.MustParseAddr("192.0.2.9")), false
	for i := range rate {
		if a.failed(fast, now.Add(time.Duration(i)*time.Second/rate)) {
			cooled = true
			break
		}
	}
	if !cooled {
		t.Errorf("failures at the whole per-IP rate of %d/s did not cool the source within 1 s", rate)
	}
	// Off: never.
	off := newAdmission(&Config{PerIPRate: rate, PerIPBurst: burst, AcceptRate: 1, AcceptBurst: 1})
	for range 1000 {
		if off.failed(src, now) {
			t.Fatal("-flood-cooldown 0 cooled a source")
		}
	}
}

// TestFailedByClient pins which refusals count against a source: those
// of its own doing, not the service's.
func TestFailedByClient(t *testing.T) {
	for _, r := range []refusal{refuseMalformed, refuseMalformedV5, refuseProtocol, refuseClientID, refuseTooLarge,
		refuseTimeout, refuseBadCredentials, refuseRevoked, refuseNoTenant, refuseSNI} {
		if !failedByClient(r) {
			t.Errorf("%s does not count against its source", r.label)
		}
	}
	for _, r := range []refusal{refuseOverLimit, refuseAuthDown, refuseNoRoute, refuseLimiterDown, refuseNodeDown, refuseNoLeader, refuseShuttingDown} {
		if failedByClient(r) {
			t.Errorf("%s counts against its source: it is the service's doing", r.label)
		}
	}
}
