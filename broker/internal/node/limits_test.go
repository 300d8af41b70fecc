package node

import (
	"testing"

	"berth.dev/billing/plan"
	"berth.dev/broker/internal/acl"
	"berth.dev/broker/packet"
)

// publishChecks is what the shard runs for every inbound PUBLISH on a node
// connection: the credential's ACL, then the tenant's and client's quotas.
func publishChecks(b testing.TB) func() {
	pro, _ := plan.Lookup("pro")
	q := pro.Defaults
	q.MaxMsgsPerSec, q.ClientMsgsPerSec = 1e9, 1e9 // measure the checks, not refusals
	q.MaxBytesPerSec, q.ClientBytesPerSec = 1e12, 1e12
	q.MonthlyMessages = 1 << 62
	l := newTenantLimits(q, 0).newConn()
	rules := &acl.ACL{Pub: []string{"cmd/#", "devices/+/telemetry/#"}}
	topic := []byte("devices/d1/telemetry/temp")
	return func() {
		if !rules.CanPublish(topic) {
			b.Fatal("ACL refused")
		}
		if code, _ := l.AdmitPublish(64, packet.Version5); code != packet.CodeSuccess {
			b.Fatalf("quota refused: %v", code)
		}
	}
}

func TestPublishChecksAllocateNothing(t *testing.T) {
	check := publishChecks(t)
	if n := testing.AllocsPerRun(1000, check); n != 0 {
		t.Fatalf("ACL + quota checks allocate %v per PUBLISH, want 0", n)
	}
}

func BenchmarkPublishChecks(b *testing.B) {
	check := publishChecks(b)
	b.ReportAllocs()
	for b.Loop() {
		check()
	}
}
