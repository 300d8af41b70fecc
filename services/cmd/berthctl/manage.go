package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"berth.dev/services/apiclient"
)

// tenantCall runs one GET-like call on the resolved tenant and prints the
// raw JSON when --json; otherwise it decodes into out and returns true.
func tenantCall(ctx context.Context, e *env, f *flags, r apiclient.Route, extra []string, q url.Values, in, out any) (bool, error) {
	s, err := open(e, f)
	if err != nil {
		return false, err
	}
	t, err := s.tenant(ctx, e, f)
	if err != nil {
		return false, err
	}
	return s.call(ctx, e, f, r, append([]string{t.ID}, extra...), q, in, out)
}

// accountCall is tenantCall for an account's own routes (no {tid}).
func accountCall(ctx context.Context, e *env, f *flags, r apiclient.Route, args []string, q url.Values, in, out any) (bool, error) {
	s, err := open(e, f)
	if err != nil {
		return false, err
	}
	return s.call(ctx, e, f, r, args, q, in, out)
}

// call makes the call and hands its answer to listing: printed as JSON
// under --json (false: nothing more to print), else decoded into out.
func (s *session) call(ctx context.Context, e *env, f *flags, r apiclient.Route, args []string, q url.Values, in, out any) (bool, error) {
	var raw json.RawMessage
	if err := s.api.Call(ctx, r, args, q, in, &raw); err != nil {
		return false, err
	}
	if len(raw) == 0 {
		return true, nil
	}
	asJSON := f.json != nil && *f.json
	return listing(e, raw, asJSON, out)
}

func runQuotas(ctx context.Context, e *env, args []string) error {
	return subcommand(ctx, e, "quotas", args, "get", map[string]func(context.Context, *env, []string) error{
		"get": quotasGet, "set": quotasSet,
	})
}

type quotasResponse struct {
	Plan   string           `json:"plan"`
	Quotas map[string]int64 `json:"quotas"`
	Max    map[string]int64 `json:"max"`
}

func printQuotas(e *env, q quotasResponse) {
	keys := make([]string, 0, len(q.Quotas))
	for k := range q.Quotas {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	rows := make([][]string, 0, len(keys))
	for _, k := range keys {
		max := "-"
		if m, ok := q.Max[k]; ok {
			max = fmt.Sprint(m)
		}
		rows = append(rows, []string{k, fmt.Sprint(q.Quotas[k]), max})
	}
	fmt.Fprintf(e.stdout, "Plan %s\n", q.Plan)
	table(e.stdout, []string{"QUOTA", "VALUE", "PLAN MAX"}, rows)
}

func quotasGet(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "quotas get", "[--json]", "  berthctl quotas").withTenant().withJSON()
	if _, err := f.parse(args, 0, 0); err != nil {
		return err
	}
	var q quotasResponse
	if ok, err := tenantCall(ctx, e, f, apiclient.GetQuotas, nil, nil, nil, &q); !ok || err != nil {
		return err
	}
	printQuotas(e, q)
	return nil
}

func quotasSet(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "quotas set", "KEY=VALUE... [--json]", "  berthctl quotas set max_connections=50 max_msgs_per_sec=200").withTenant().withJSON()
	pos, err := f.parse(args, 1, -1)
	if err != nil {
		return err
	}
	body, err := parseAssignments(pos)
	if err != nil {
		return err
	}
	var q quotasResponse
	if ok, err := tenantCall(ctx, e, f, apiclient.SetQuotas, nil, nil, body, &q); !ok || err != nil {
		return err
	}
	printQuotas(e, q)
	return nil
}

// parseAssignments turns key=integer arguments into a JSON object.
func parseAssignments(pos []string) (map[string]int64, error) {
	body := make(map[string]int64, len(pos))
	for _, a := range pos {
		k, v, ok := strings.Cut(a, "=")
		if !ok || k == "" {
			return nil, usagef("quotas set: %q is not KEY=VALUE", a)
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, usagef("quotas set: %s: %q is not an integer", k, v)
		}
		body[k] = n
	}
	return body, nil
}

func runTopics(ctx context.Context, e *env, args []string) error {
	return subcommand(ctx, e, "topics", args, "list", map[string]func(context.Context, *env, []string) error{
		"list": topicsList, "create": topicsCreate, "delete": topicsDelete,
	})
}

func topicsList(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "topics list", "[--limit N | --all] [--json]", "  berthctl topics --all").withTenant().withJSON().withPages()
	if _, err := f.parse(args, 0, 0); err != nil {
		return err
	}
	items, printed, err := tenantList[apiclient.TopicRule](ctx, e, f, apiclient.ListTopicRules, nil)
	if printed || err != nil {
		return err
	}
	printRules(e, items)
	return nil
}

func printRules(e *env, rules []apiclient.TopicRule) {
	rows := make([][]string, 0, len(rules))
	for _, r := range rules {
		rows = append(rows, []string{r.ID, r.Filter, num(r.RetentionSeconds), strconv.FormatBool(r.RetainedAllowed), num(r.MaxMessageSize), num(r.MaxMsgsPerSec)})
	}
	table(e.stdout, []string{"ID", "FILTER", "RETENTION_S", "RETAINED", "MAX_SIZE", "MAX_RATE"}, rows)
}

func topicsCreate(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "topics create", "--filter FILTER [--retention SECONDS] [--retained=false] [--max-size BYTES] [--max-rate N] [--json]",
		"  berthctl topics create --filter 'logs/#' --retention 3600 --retained=false").withTenant().withJSON()
	filter := f.String("filter", "", "topic filter the rule governs (required)")
	retention := f.Int64("retention", -1, "seconds queued messages are kept (default the tenant's)")
	retained := f.Bool("retained", true, "whether retained messages are allowed")
	size := f.Int64("max-size", 0, "largest message in bytes (default the tenant's)")
	rate := f.Int64("max-rate", 0, "messages per second on the rule's topics together (default none)")
	if _, err := f.parse(args, 0, 0); err != nil {
		return err
	}
	if *filter == "" {
		f.Usage()
		return usagef("topics create: --filter is required")
	}
	body := map[string]any{"filter": *filter, "retained_allowed": *retained}
	if *retention >= 0 {
		body["retention_seconds"] = *retention
	}
	if *size > 0 {
		body["max_message_size"] = *size
	}
	if *rate > 0 {
		body["max_msgs_per_sec"] = *rate
	}
	var r apiclient.TopicRule
	if ok, err := tenantCall(ctx, e, f, apiclient.CreateTopicRule, nil, nil, body, &r); !ok || err != nil {
		return err
	}
	printRules(e, []apiclient.TopicRule{r})
	return nil
}

func topicsDelete(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "topics delete", "ID", "  berthctl topics delete rule_...").withTenant()
	pos, err := f.parse(args, 1, 1)
	if err != nil {
		return err
	}
	if _, err := tenantCall(ctx, e, f, apiclient.DeleteTopicRule, pos, nil, nil, nil); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "Deleted rule %s\n", pos[0])
	return nil
}

func runSessions(ctx context.Context, e *env, args []string) error {
	return subcommand(ctx, e, "sessions", args, "list", map[string]func(context.Context, *env, []string) error{
		"list": sessionsList, "kick": sessionsKick,
	})
}

func sessionsList(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "sessions list", "[--state connected|offline] [--prefix P] [--limit N | --all] [--json]", "  berthctl sessions --state connected --all").withTenant().withJSON().withPages()
	state := f.String("state", "", "connected or offline (default both)")
	prefix := f.String("prefix", "", "client ids starting with this")
	if _, err := f.parse(args, 0, 0); err != nil {
		return err
	}
	q := url.Values{}
	if *state != "" {
		q.Set("state", *state)
	}
	if *prefix != "" {
		q.Set("prefix", *prefix)
	}
	items, printed, err := tenantList[apiclient.MQTTSession](ctx, e, f, apiclient.ListSessions, q)
	if printed || err != nil {
		return err
	}
	rows := make([][]string, 0, len(items))
	for _, s := range items {
		st := "offline"
		if s.Connected {
			st = "connected"
		}
		rows = append(rows, []string{s.ClientID, st, fmt.Sprint(s.ProtocolVersion), orDash(s.RemoteAddr), fmt.Sprint(s.Subscriptions), fmt.Sprint(s.QueuedMessages), fmt.Sprint(s.Inflight), fmt.Sprint(s.Dropped)})
	}
	table(e.stdout, []string{"CLIENT ID", "STATE", "MQTT", "REMOTE", "SUBS", "QUEUED", "INFLIGHT", "DROPPED"}, rows)
	return nil
}

func sessionsKick(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "sessions kick", "CLIENTID", "  berthctl sessions kick sensor-12").withTenant()
	pos, err := f.parse(args, 1, 1)
	if err != nil {
		return err
	}
	if _, err := tenantCall(ctx, e, f, apiclient.KickSession, pos, nil, nil, nil); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "Kicked %s\n", pos[0])
	return nil
}
