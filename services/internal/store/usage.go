package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// UsagePoint is one step of a tenant's usage series. Counters are summed
// over the step (and over nodes); StoredBytes is a level, so it is the
// largest per-minute total within the step.
type UsagePoint struct {
	T          time.Time
	MessagesIn int64 // PUBLISH packets read, refused ones too
	// MessagesAccepted are the messages of MessagesIn the nodes accepted:
	// what the monthly quota counts and billing bills.
	MessagesAccepted  int64
	MessagesOut       int64
	BytesIn           int64
	BytesOut          int64
	ConnectionSeconds int64
	StoredBytes       int64
	Drops             map[string]int64
}

// Usage returns the tenant's usage by step, in buckets aligned to the Unix
// epoch (UTC): one point for each bucket [k·step, (k+1)·step) that
// intersects [from, to), zero where nothing was recorded, each point
// covering its whole bucket (so a series may start before from and end
// after to). step must be a whole number of seconds.
// Past the minute rows' retention it answers from the hourly and daily
// rollups when step is a whole number of hours (see seriesSource), else
// zero there.
func (s *Store) Usage(ctx context.Context, tid string, from, to time.Time, step time.Duration) ([]UsagePoint, error) {
	m, err := s.usageSeries(ctx, usageScope{tenant: tid}, from, to, step)
	return m[""], err
}

// AccountUsage is Usage summed over every tenant the account has now or
// had and deleted (deleted_tenants: a deleted tenant's traffic stays the
// account's) (stored bytes: per minute summed over tenants and nodes, the
// largest such total in each step).
func (s *Store) AccountUsage(ctx context.Context, accountID string, from, to time.Time, step time.Duration) ([]UsagePoint, error) {
	m, err := s.usageSeries(ctx, usageScope{account: accountID}, from, to, step)
	return m[""], err
}

// TenantUsage is one tenant's series in an account's usage.
type TenantUsage struct {
	TenantID string
	Slug     string
	// DeletedAt is when the tenant was deleted; nil for a live tenant.
	DeletedAt *time.Time
	Points    []UsagePoint
}

// AccountUsageByTenant is Usage for each tenant the account has now, and
// for each tenant it deleted that has usage in the range, in tenant id
// order; every live tenant has a series, zero where it did nothing.
func (s *Store) AccountUsageByTenant(ctx context.Context, accountID string, from, to time.Time, step time.Duration) ([]TenantUsage, error) {
	m, err := s.usageSeries(ctx, usageScope{account: accountID, perTenant: true}, from, to, step)
	if err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT id, slug, NULL::timestamptz FROM tenants WHERE account_id = $1
		UNION ALL SELECT id, slug, deleted_at FROM deleted_tenants WHERE account_id = $1 AND id = ANY($2)
		ORDER BY 1`, accountID, seriesTenants(m))
	if err != nil {
		return nil, classify("account tenants", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (TenantUsage, error) {
		var t TenantUsage
		err := row.Scan(&t.TenantID, &t.Slug, &t.DeletedAt)
		if t.DeletedAt != nil {
			*t.DeletedAt = t.DeletedAt.UTC()
		}
		return t, err
	})
	if err != nil {
		return nil, classify("account tenants", err)
	}
	for i := range out {
		if out[i].Points = m[out[i].TenantID]; out[i].Points == nil {
			out[i].Points = emptyUsage(from, to, step)
		}
	}
	return out, nil
}

// seriesTenants returns the tenant ids a per-tenant series map holds (every key but "").
func seriesTenants(m map[string][]UsagePoint) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		if k != "" {
			keys = append(keys, k)
		}
	}
	return keys
}

// usageScope says whose usage a series sums: one tenant, or every tenant
// of an account, together or perTenant.
type usageScope struct {
	tenant, account string
	perTenant       bool
}

// emptyUsage is a series of zero points for each aligned step of [from, to).
func emptyUsage(from, to time.Time, step time.Duration) []UsagePoint {
	from, to = AlignRange(from, to, step)
	var points []UsagePoint
	for t := from; t.Before(to); t = t.Add(step) {
		points = append(points, UsagePoint{T: t, Drops: map[string]int64{}})
	}
	return points
}

// usageSeries returns the usage series of sc, keyed by tenant id when
// sc.perTenant, else under "" (always present).
func (s *Store) usageSeries(ctx context.Context, sc usageScope, from, to time.Time, step time.Duration) (map[string][]UsagePoint, error) {
	stepSec := int64(step / time.Second)
	from, to = AlignRange(from, to, step)
	series := map[string][]UsagePoint{"": emptyUsage(from, to, step)}
	point := func(key string, b time.Time) *UsagePoint {
		ps := series[key]
		if ps == nil {
			ps = emptyUsage(from, to, step)
			series[key] = ps
		}
		i := int(b.Sub(from) / step)
		if i < 0 || i >= len(ps) || !ps[i].T.Equal(b) {
			return nil
		}
		return &ps[i]
	}
	// $1 the tenant, or the account whose tenants to sum; $5 whether to
	// key rows by tenant.
	// $6 where the minute rows begin, rollups before (see seriesSource).
	keptFrom, err := s.seriesKeptFrom(ctx, "usage", step)
	if err != nil {
		return nil, classify("usage", err)
	}
	tenants, args := `tenant_id = $1`, []any{sc.tenant, from, to, stepSec, sc.perTenant, keptFrom}
	if sc.account != "" {
		// The tenants the account has and those it deleted: usage
		// outlives a tenant (migration 00011).
		tenants, args[0] = `tenant_id IN (SELECT id FROM tenants WHERE account_id = $1
			UNION ALL SELECT id FROM deleted_tenants WHERE account_id = $1)`, sc.account
	}
	rows, err := s.pool.Query(ctx, `
		SELECT k, b, sum(mi)::bigint, sum(ma)::bigint, sum(mo)::bigint, sum(bi)::bigint, sum(bo)::bigint, sum(cs)::bigint, max(sb)::bigint
		FROM (
			SELECT CASE WHEN $5 THEN tenant_id ELSE '' END AS k,
			       date_bin($4::bigint * interval '1 second', bucket, 'epoch'::timestamptz) AS b, bucket,
			       sum(messages_in) AS mi, sum(messages_accepted) AS ma, sum(messages_out) AS mo, sum(bytes_in) AS bi,
			       sum(bytes_out) AS bo, sum(connection_seconds) AS cs, sum(stored_bytes) AS sb
			FROM `+seriesSource("usage", step, "messages_in, messages_accepted, messages_out, bytes_in, bytes_out, connection_seconds, stored_bytes", "$2", "$3", "$6")+`
			WHERE `+tenants+`
			GROUP BY 1, 2, 3
		) per_minute
		GROUP BY k, b ORDER BY k, b`, args...)
	if err != nil {
		return nil, classify("usage", err)
	}
	for rows.Next() {
		var k string
		var b time.Time
		var p UsagePoint
		if err := rows.Scan(&k, &b, &p.MessagesIn, &p.MessagesAccepted, &p.MessagesOut, &p.BytesIn, &p.BytesOut, &p.ConnectionSeconds, &p.StoredBytes); err != nil {
			rows.Close()
			return nil, classify("usage", err)
		}
		if at := point(k, b); at != nil {
			p.T, p.Drops = at.T, at.Drops
			*at = p
		}
	}
	if err := rows.Err(); err != nil {
		return nil, classify("usage", err)
	}
	if args[5], err = s.seriesKeptFrom(ctx, "usage_drops", step); err != nil {
		return nil, classify("usage drops", err)
	}
	rows, err = s.pool.Query(ctx, `
		SELECT CASE WHEN $5 THEN tenant_id ELSE '' END AS k,
		       date_bin($4::bigint * interval '1 second', bucket, 'epoch'::timestamptz) AS b, reason, sum(count)::bigint
		FROM `+seriesSource("usage_drops", step, "reason, count", "$2", "$3", "$6")+` WHERE `+tenants+`
		GROUP BY 1, 2, 3 ORDER BY 1, 2, 3`, args...)
	if err != nil {
		return nil, classify("usage drops", err)
	}
	defer rows.Close()
	for rows.Next() {
		var k, reason string
		var b time.Time
		var n int64
		if err := rows.Scan(&k, &b, &reason, &n); err != nil {
			return nil, classify("usage drops", err)
		}
		if at := point(k, b); at != nil {
			at.Drops[reason] = n
		}
	}
	return series, classify("usage drops", rows.Err())
}

// Traffic is one step of a credential's usage: its connections' messages
// and bytes, in and out, counted as the tenant's meters of the same names.
type Traffic struct {
	T           time.Time
	MessagesIn  int64
	MessagesOut int64
	BytesIn     int64
	BytesOut    int64
}

// CredentialUsage is one credential's series.
type CredentialUsage struct {
	CredentialID string
	Name         *string // nil when no credential of the tenant has that id any more
	Points       []Traffic
}

// UsageByCredential returns the tenant's usage per credential by step,
// from the hourly usage_credentials rows: a series for each credential
// with traffic in [from, to) (in credential id order), each with a point
// for every aligned step like Usage. step must be a whole number of hours.
func (s *Store) UsageByCredential(ctx context.Context, tid string, from, to time.Time, step time.Duration) ([]CredentialUsage, error) {
	from, to = AlignRange(from, to, step)
	n := int(to.Sub(from) / step)
	rows, err := s.pool.Query(ctx, `
		SELECT u.credential_id, c.name, date_bin($4::bigint * interval '1 second', u.hour, 'epoch'::timestamptz) AS b,
		       sum(u.messages_in)::bigint, sum(u.messages_out)::bigint, sum(u.bytes_in)::bigint, sum(u.bytes_out)::bigint
		FROM usage_credentials u LEFT JOIN credentials c ON c.id = u.credential_id AND c.tenant_id = u.tenant_id
		WHERE u.tenant_id = $1 AND u.hour >= $2 AND u.hour < $3
		GROUP BY 1, 2, 3 ORDER BY 1, 3`, tid, from, to, int64(step/time.Second))
	if err != nil {
		return nil, classify("usage by credential", err)
	}
	defer rows.Close()
	var out []CredentialUsage
	for rows.Next() {
		var id string
		var name *string
		var p Traffic
		if err := rows.Scan(&id, &name, &p.T, &p.MessagesIn, &p.MessagesOut, &p.BytesIn, &p.BytesOut); err != nil {
			return nil, classify("usage by credential", err)
		}
		if len(out) == 0 || out[len(out)-1].CredentialID != id {
			cu := CredentialUsage{CredentialID: id, Name: name, Points: make([]Traffic, n)}
			for i := range cu.Points {
				cu.Points[i].T = from.Add(time.Duration(i) * step)
			}
			out = append(out, cu)
		}
		ps := out[len(out)-1].Points
		if i := int(p.T.Sub(from) / step); i >= 0 && i < n {
			p.T = ps[i].T
			ps[i] = p
		}
	}
	return out, classify("usage by credential", rows.Err())
}

// AlignRange widens [from, to) to whole steps aligned to the Unix epoch
// (UTC): from down to the step boundary at or before it, to up to the one
// at or after it. step must be a whole number of seconds.
func AlignRange(from, to time.Time, step time.Duration) (time.Time, time.Time) {
	sec := int64(step / time.Second)
	lo := floorDiv(from.Unix(), sec) * sec
	hi := floorDiv(to.Unix(), sec) * sec
	if hi < to.Unix() || to.Nanosecond() > 0 {
		hi += sec
	}
	return time.Unix(lo, 0).UTC(), time.Unix(hi, 0).UTC()
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}
