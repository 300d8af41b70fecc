package metering

import (
	"context"
	"testing"
	"time"

	"berth.dev/testenv"
)

// TestMessagesMeterBillsAcceptedOnly: the messages meter is the accepted
// messages of the month, from the minute rows from kept_from on and from
// the hourly rollups before it; the PUBLISHes the nodes read and refused
// (messages_in beyond messages_accepted) are billed nowhere.
func TestMessagesMeterBillsAcceptedOnly(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	month := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	kept := month.AddDate(0, 0, 10)
	seedTenant(t, pool, "acc_r", "ten_r", "pro", month)
	// Before kept_from only the hourly rollup is left: 50 read, 20 accepted.
	if _, err := pool.Exec(ctx, `INSERT INTO usage_hourly (tenant_id, hour, messages_in, messages_accepted, messages_out, bytes_in, bytes_out, connection_seconds, stored_bytes)
		VALUES ('ten_r', $1, 50, 20, 0, 0, 0, 0, 0)`, month.Add(5*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO retention (table_name, kept_from) VALUES ('usage', $1)`, kept); err != nil {
		t.Fatal(err)
	}
	// From kept_from on the minute rows: 60 accepted, 61 more read and refused.
	if err := flush(ctx, pool, usageRow{"ten_r", "n1", kept.Add(time.Hour), 60, 0, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	var read int64
	if err := pool.QueryRow(ctx, `SELECT (SELECT sum(messages_in) FROM usage) + (SELECT sum(messages_in) FROM usage_hourly)`).Scan(&read); err != nil {
		t.Fatal(err)
	}
	if _, err := Bill(ctx, pool, "acc_r", month, month.AddDate(0, 0, 20), false); err != nil {
		t.Fatal(err)
	}
	var line int64
	if err := pool.QueryRow(ctx, `SELECT l.quantity FROM invoice_lines l JOIN invoices i ON i.id = l.invoice_id
		WHERE i.account_id = 'acc_r' AND l.meter = 'messages'`).Scan(&line); err != nil {
		t.Fatal(err)
	}
	if got := readMeters(t, pool, "ten_r", month).messages; got != 80 || line != 80 {
		t.Fatalf("messages meter %d, invoice line %d; want the 80 accepted of the %d read", got, line, read)
	}
}
