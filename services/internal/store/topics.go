package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// TopicRule applies to the topics matching Filter; nil fields fall back to
// the tenant's quotas (MaxMsgsPerSec: no rate of its own).
type TopicRule struct {
	ID               string
	TenantID         string
	Filter           string
	RetentionSeconds *int64
	RetainedAllowed  bool
	MaxMessageSize   *int32
	MaxMsgsPerSec    *int32
	CreatedAt        time.Time
}

const topicRuleColumns = `id, tenant_id, filter, retention_seconds, retained_allowed, max_message_size, max_msgs_per_sec, created_at`

func scanTopicRule(row pgx.Row) (TopicRule, error) {
	var r TopicRule
	err := row.Scan(&r.ID, &r.TenantID, &r.Filter, &r.RetentionSeconds, &r.RetainedAllowed, &r.MaxMessageSize, &r.MaxMsgsPerSec, &r.CreatedAt)
	return r, err
}

// Every change to a tenant's topic rules is announced on ChannelTopicRules
// in its own transaction, so broker nodes apply it live and never see a
// notification without the change.

// CreateTopicRule stores a rule and fills CreatedAt; a second rule for the
// same filter is a *ConflictError on "filter" naming the rule that has it.
func (s *Store) CreateTopicRule(ctx context.Context, r *TopicRule) error {
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx,
			`INSERT INTO topic_rules (id, tenant_id, filter, retention_seconds, retained_allowed, max_message_size, max_msgs_per_sec)
			 VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING created_at`,
			r.ID, r.TenantID, r.Filter, r.RetentionSeconds, r.RetainedAllowed, r.MaxMessageSize, r.MaxMsgsPerSec).Scan(&r.CreatedAt)
		if err != nil {
			return err
		}
		return notify(ctx, tx, ChannelTopicRules, r.TenantID)
	})
	return s.filterConflict(ctx, "create topic rule", err, *r)
}

// filterConflict classifies err and, for a filter another rule of the
// tenant already has, names that rule.
func (s *Store) filterConflict(ctx context.Context, op string, err error, r TopicRule) error {
	err = classify(op, err)
	var c *ConflictError
	if !errors.As(err, &c) || c.Field != "filter" {
		return err
	}
	_ = s.pool.QueryRow(ctx, `SELECT id FROM topic_rules WHERE tenant_id = $1 AND filter = $2 AND id <> $3`,
		r.TenantID, r.Filter, r.ID).Scan(&c.HeldBy) // gone meanwhile: the conflict stays, unnamed
	return c
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
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM topic_rules WHERE id = $1 AND tenant_id = $2`, id, tid)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return ErrNotFound
		}
		return notify(ctx, tx, ChannelTopicRules, tid)
	})
	if errors.Is(err, ErrNotFound) {
		return err
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
// rule already has is a *ConflictError on "filter" naming that rule.
func (s *Store) UpdateTopicRule(ctx context.Context, r TopicRule) error {
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx,
			`UPDATE topic_rules SET filter = $3, retention_seconds = $4, retained_allowed = $5, max_message_size = $6, max_msgs_per_sec = $7
			 WHERE id = $1 AND tenant_id = $2`,
			r.ID, r.TenantID, r.Filter, r.RetentionSeconds, r.RetainedAllowed, r.MaxMessageSize, r.MaxMsgsPerSec)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return ErrNotFound
		}
		return notify(ctx, tx, ChannelTopicRules, r.TenantID)
	})
	if errors.Is(err, ErrNotFound) {
		return err
	}
	return s.filterConflict(ctx, "update topic rule", err, r)
}
