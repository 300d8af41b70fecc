package tenantdns

import (
	"context"
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/miekg/dns"
)

// TestFloodOfUnknownNames: queries for random names, each unknown and so
// each a Postgres lookup, while Postgres is stuck (tenants locked): they
// run at most maxLookups statements at once however many wait and however
// large the pool, queries for one name share one statement, and a tenant
// whose route is cached is answered all the while, even with every UDP
// slot taken by a query waiting for a lookup.
func TestFloodOfUnknownNames(t *testing.T) {
	f := newFixture(t, func(c *pgxpool.Config) { c.MaxConns = 16 }) // room for many more than maxLookups
	cfg := testConfig()
	s := f.start(t, cfg)
	addr := s.Addr()
	hot := question("fleet."+zone+".", dns.TypeA)
	if got := answer(ask(t, "udp", addr, hot)); !slices.Equal(got, []string{"A 192.0.2.1"}) { // now cached
		t.Fatalf("fleet A: %q", got)
	}

	// Postgres stuck: every query reading tenants waits for this lock,
	// taken on a connection of its own (its statements are not counted).
	ctx := context.Background()
	locker, err := pgx.Connect(ctx, f.pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close(ctx)
	tx, err := locker.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `LOCK TABLE tenants IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}

	flood, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer flood.Close()
	send := func(name string) {
		wire, err := question(name+"."+zone+".", dns.TypeA).Pack()
		if err != nil {
			t.Fatal(err)
		}
		flood.Write(wire) // the answers are not read
	}
	for range 20 { // one name, asked 20 times
		send("same-name")
	}
	// Random names until every UDP slot holds a query, most of them
	// waiting for a lookup, and Postgres holds as many statements as it
	// will get (each query waits 2 s at most: more are sent as they give
	// up).
	flooded := func() bool {
		return len(s.udpSlots) == maxUDPInFlight && s.resp.lookups.underWay() >= maxUDPInFlight/2 && f.sql.inflight.Load() >= maxLookups
	}
	deadline := time.Now().Add(10 * time.Second)
	sent := 0
	for !flooded() {
		if time.Now().After(deadline) || sent == 100000 {
			t.Fatalf("after %d names sent: %d UDP slots taken (want all %d), %d lookups under way, %d statements in Postgres",
				sent, len(s.udpSlots), maxUDPInFlight, s.resp.lookups.underWay(), f.sql.inflight.Load())
		}
		send(fmt.Sprintf("rnd-%d", sent))
		sent++ // one the socket's full buffer dropped is made up for by the next
	}
	t.Logf("every UDP slot taken, %d lookups under way, after %d unknown names sent; %d statements in Postgres",
		s.resp.lookups.underWay(), sent, f.sql.inflight.Load())

	r := ask(t, "udp", addr, hot)
	if got := answer(r); r.Rcode != dns.RcodeSuccess || !slices.Equal(got, []string{"A 192.0.2.1"}) {
		t.Fatalf("fleet A during the flood: rcode %d %q", r.Rcode, got)
	}
	if m := f.sql.maxInflight.Load(); m > maxLookups {
		t.Fatalf("%d statements at once in Postgres, want at most %d", m, maxLookups)
	}
	if n := f.sql.slugQueries("same-name"); n > 1 {
		t.Fatalf("20 queries for one name ran %d lookups, want 1", n)
	}

	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(5 * time.Second)
	for s.resp.lookups.underWay() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d lookups still under way 5 s after Postgres came back", s.resp.lookups.underWay())
		}
		time.Sleep(5 * time.Millisecond) // polling with a deadline
	}
	if m := f.sql.maxInflight.Load(); m > maxLookups {
		t.Fatalf("%d statements at once in Postgres, want at most %d", m, maxLookups)
	}
}
