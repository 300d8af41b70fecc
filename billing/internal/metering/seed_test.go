package metering

import (
	"context"
	"io"
	"log/slog"
	"math/big"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// seedTenant creates account (if new) and its tenant id on p, created at.
func seedTenant(t *testing.T, pool *pgxpool.Pool, account, id, p string, at time.Time) {
	t.Helper()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO accounts (id, email, password_hash) VALUES ($1, $1 || '@example.com', 'x')
		ON CONFLICT DO NOTHING`, account); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO tenants (id, account_id, slug, plan, created_at) VALUES ($1, $2, replace($1, '_', '-'), $3, $4)`,
		id, account, p, at); err != nil {
		t.Fatal(err)
	}
}

// usageRow is one node flush's deltas for a tenant's minute. accepted is
// the messages the node accepted (billed); it read refusedPer(accepted)
// more that it refused, which no meter may bill.
type usageRow struct {
	tenant, node                                    string
	at                                              time.Time
	accepted, bytesIn, bytesOut, connSecs, storedBy int64
}

// refusedPer is how many refused PUBLISHes each test flush reads besides
// its accepted messages: as many again, plus one.
func refusedPer(accepted int64) int64 { return accepted + 1 }

// flush adds r the way a node's flush does (broker/internal/usage.Write):
// counters added to the minute's row, stored bytes replaced; messages_in
// counts the accepted messages and refusedPer(accepted) refused ones.
func flush(ctx context.Context, pool *pgxpool.Pool, rows ...usageRow) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	for _, r := range rows {
		if _, err := tx.Exec(ctx, `INSERT INTO usage (tenant_id, node_id, bucket, messages_in, messages_out, bytes_in, bytes_out, connection_seconds, stored_bytes, messages_accepted)
			VALUES ($1, $2, $3, $4, 0, $5, $6, $7, $8, $9)
			ON CONFLICT (tenant_id, bucket, node_id) DO UPDATE SET
				messages_in = usage.messages_in + EXCLUDED.messages_in,
				messages_accepted = usage.messages_accepted + EXCLUDED.messages_accepted,
				bytes_in = usage.bytes_in + EXCLUDED.bytes_in, bytes_out = usage.bytes_out + EXCLUDED.bytes_out,
				connection_seconds = usage.connection_seconds + EXCLUDED.connection_seconds,
				stored_bytes = EXCLUDED.stored_bytes`,
			r.tenant, r.node, r.at, r.accepted+refusedPer(r.accepted), r.bytesIn, r.bytesOut, r.connSecs, r.storedBy, r.accepted); err != nil {
			return err
		}
	}
	return tx.Commit(ctx)
}

// roundHalfUp is num/den rounded half up, by big.Rat (the tests' own
// arithmetic, apart from plan.Rate.Amount's).
func roundHalfUp(num, den *big.Int) int64 {
	r := new(big.Rat).SetFrac(num, den)
	r.Add(r, big.NewRat(1, 2))
	q := new(big.Int).Quo(r.Num(), r.Denom()) // floor for a positive value
	return q.Int64()
}

func mul(a ...int64) *big.Int {
	n := big.NewInt(1)
	for _, v := range a {
		n.Mul(n, big.NewInt(v))
	}
	return n
}
