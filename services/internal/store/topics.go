package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// TopicRule applies to the topics matching Filter; nil fields fall back to
// the tenant's quotas.
type TopicRule struct {
	ID               string
	TenantID         string
	Filter           string
	RetentionSeconds *int64
	RetainedAllowed  bool
	MaxMessageSize   *int32
	CreatedAt        time.Time
}

const topicRuleColumns = `id, tenant_id, filter, retention_seconds, retained_allowed, max_message_size, created_at`

func scanTopicRule(row pgx.Row) (TopicRule, error) {
	var r TopicRule
	err := row.Scan(&r.ID, &r.TenantID, &r.Filter, &r.RetentionSeconds, &r.RetainedAllowed, &r.MaxMessageSize, &r.CreatedAt)
	return r, err
}

// CreateTopicRule stores a rule and fills CreatedAt; a second rule for the
// same filter is a *ConflictError on "filter".
func (s *Store) CreateTopicRule(ctx context.Context, r *TopicRule) error {
	err := s.pool.QueryRow(ctx,
		`INSERT INTO topic_rules (id, tenant_id, filter, retention_seconds, retained_allowed, max_message_size)
		 VALUES ($1, $2, $3, $4, $5, $6) RETURNING created_at`,
		r.ID, r.TenantID, r.Filter, r.RetentionSeconds, r.RetainedAllowed, r.MaxMessageSize).Scan(&r.CreatedAt)
	return classify("create topic rule", err)
}

// ListTopicRules pages through a tenant's rules, oldest first.
func (s *Store) ListTopicRules(ctx context.Context, tid string, p Page) ([]TopicRule, *Cursor, error) {
	at, id := p.afterArgs()
	rows, err := s.pool.Query(ctx,
		`SELECT `+topicRuleColumns+` FROM topic_rules
		 WHERE tenant_id = $1 AND ($2::timestamptz IS NULL OR (created_at, id) > ($2, $3::text))
		 ORDER BY created_at, id LIMIT $4`, tid, at, id, p.Limit+1)
	if err != nil {
		return nil, nil, classify("list topic rules", err)
	}
	rs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (TopicRule, error) { return scanTopicRule(row) })
	if err != nil {
		return nil, nil, classify("list topic rules", err)
	}
	rs, next := trim(rs, p.Limit, func(r TopicRule) Cursor { return Cursor{At: r.CreatedAt, ID: r.ID} })
	return rs, next, nil
}

// DeleteTopicRule deletes one of a tenant's rules.
func (s *Store) DeleteTopicRule(ctx context.Context, tid, id string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM topic_rules WHERE id = $1 AND tenant_id = $2`, id, tid)
	if err == nil && tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return classify("delete topic rule", err)
}

// TopicRule returns one of a tenant's rules.
func (s *Store) TopicRule(ctx context.Context, tid, id string) (TopicRule, error) {
	r, err := scanTopicRule(s.pool.QueryRow(ctx,
		`SELECT `+topicRuleColumns+` FROM topic_rules WHERE id = $1 AND tenant_id = $2`, id, tid))
	return r, classify("topic rule", err)
}

// UpdateTopicRule replaces a rule's filter and settings; a filter another
// rule already has is a *ConflictError on "filter".
func (s *Store) UpdateTopicRule(ctx context.Context, r TopicRule) error {
	tag, err := s.pool.Exec(ctx,
		`UPDATE topic_rules SET filter = $3, retention_seconds = $4, retained_allowed = $5, max_message_size = $6
		 WHERE id = $1 AND tenant_id = $2`,
		r.ID, r.TenantID, r.Filter, r.RetentionSeconds, r.RetainedAllowed, r.MaxMessageSize)
	if err == nil && tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return classify("update topic rule", err)
}
