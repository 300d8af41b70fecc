package node

import (
	"testing"
	"time"

	"berth.dev/broker/internal/acl"
	"berth.dev/broker/internal/tenanttest"
	"berth.dev/broker/packet"
)

// publishChecks is what the shard runs for every inbound PUBLISH on a node
// connection: the credential's ACL, then the tenant's and client's quotas.
func publishChecks(b testing.TB) func() {
	q := tenanttest.Pro()
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

// TestMonthlyQuotaRollsOver: the monthly messages count starts again at
// the UTC calendar month boundary while the tenant's limits stay live.
func TestMonthlyQuotaRollsOver(t *testing.T) {
	q := tenanttest.Pro()
	q.MaxMsgsPerSec, q.ClientMsgsPerSec = 1e9, 1e9
	q.MaxBytesPerSec, q.ClientBytesPerSec = 1e12, 1e12
	q.MonthlyMessages = 3
	now := time.Date(2026, 1, 31, 23, 59, 58, 0, time.UTC)
	l := newTenantLimitsClock(q, 1, func() time.Time { return now }).newConn() // 1 used earlier this month
	admit := func(want packet.ReasonCode) {
		t.Helper()
		if code, _ := l.AdmitPublish(10, packet.Version5); code != want {
			t.Fatalf("at %s: %v, want %v", now, code, want)
		}
	}
	admit(packet.CodeSuccess)
	admit(packet.CodeSuccess)
	admit(packet.ErrQuotaExceeded) // 3 of 3 used in January
	now = now.Add(time.Second)     // 23:59:59
	admit(packet.ErrQuotaExceeded)
	now = time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC) // February: a new count
	for range 3 {
		admit(packet.CodeSuccess)
	}
	admit(packet.ErrQuotaExceeded)
	now = time.Date(2026, 2, 28, 23, 0, 0, 0, time.UTC) // later in February: still used up
	admit(packet.ErrQuotaExceeded)
	now = time.Date(2026, 4, 2, 0, 0, 0, 0, time.UTC) // a whole month with no message between
	admit(packet.CodeSuccess)
	if used := l.t.monthUsed.Load(); used != 1 {
		t.Fatalf("April has %d messages counted, want 1", used)
	}
}
