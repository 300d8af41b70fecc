package apiclient

import (
	"fmt"
	"net/url"
	"strings"
)

// Route is one operation of the API: a method and a path template as the
// OpenAPI document spells it.
type Route struct{ Method, Path string }

// Expand fills r.Path's {placeholders} with args, path-escaped, in order.
func (r Route) Expand(args ...string) (string, error) {
	var b strings.Builder
	rest := r.Path
	for {
		i := strings.IndexByte(rest, '{')
		if i < 0 {
			break
		}
		j := strings.IndexByte(rest[i:], '}')
		if j < 0 {
			return "", fmt.Errorf("apiclient: bad route %s", r.Path)
		}
		if len(args) == 0 {
			return "", fmt.Errorf("apiclient: %s %s: missing %s", r.Method, r.Path, rest[i:i+j+1])
		}
		b.WriteString(rest[:i])
		b.WriteString(url.PathEscape(args[0]))
		args, rest = args[1:], rest[i+j+1:]
	}
	if len(args) != 0 {
		return "", fmt.Errorf("apiclient: %s %s: %d arguments too many", r.Method, r.Path, len(args))
	}
	b.WriteString(rest)
	return b.String(), nil
}

// The routes the client uses.
var (
	Signup           = Route{"POST", "/v1/signup"}
	ListInvoices     = Route{"GET", "/v1/invoices"}
	GetInvoice       = Route{"GET", "/v1/invoices/{id}"}
	Login            = Route{"POST", "/v1/login"}
	Logout           = Route{"POST", "/v1/logout"}
	GetAccount       = Route{"GET", "/v1/account"}
	ListAPIKeys      = Route{"GET", "/v1/api-keys"}
	CreateAPIKey     = Route{"POST", "/v1/api-keys"}
	DeleteAPIKey     = Route{"DELETE", "/v1/api-keys/{id}"}
	ListTenants      = Route{"GET", "/v1/tenants"}
	CreateTenant     = Route{"POST", "/v1/tenants"}
	GetTenant        = Route{"GET", "/v1/tenants/{tid}"}
	ListCredentials  = Route{"GET", "/v1/tenants/{tid}/credentials"}
	CreateCredential = Route{"POST", "/v1/tenants/{tid}/credentials"}
	GetCredential    = Route{"GET", "/v1/tenants/{tid}/credentials/{cid}"}
	RevokeCredential = Route{"DELETE", "/v1/tenants/{tid}/credentials/{cid}"}
	IssueToken       = Route{"POST", "/v1/tenants/{tid}/credentials/{cid}/token"}
	GetQuotas        = Route{"GET", "/v1/tenants/{tid}/quotas"}
	SetQuotas        = Route{"PUT", "/v1/tenants/{tid}/quotas"}
	ListTopicRules   = Route{"GET", "/v1/tenants/{tid}/topics"}
	CreateTopicRule  = Route{"POST", "/v1/tenants/{tid}/topics"}
	DeleteTopicRule  = Route{"DELETE", "/v1/tenants/{tid}/topics/{id}"}
	ListRetained     = Route{"GET", "/v1/tenants/{tid}/retained"}
	ListSessions     = Route{"GET", "/v1/tenants/{tid}/sessions"}
	KickSession      = Route{"DELETE", "/v1/tenants/{tid}/sessions/{clientid}"}
	GetLatency       = Route{"GET", "/v1/tenants/{tid}/latency"}
	GetUsage         = Route{"GET", "/v1/tenants/{tid}/usage"}
	ListTraces       = Route{"GET", "/v1/tenants/{tid}/traces"}
	GetTrace         = Route{"GET", "/v1/tenants/{tid}/traces/{trace_id}"}
)

// Routes lists every route above.
var Routes = []Route{
	Signup, Login, Logout, GetAccount, ListAPIKeys, CreateAPIKey, DeleteAPIKey,
	ListTenants, CreateTenant, GetTenant,
	ListCredentials, CreateCredential, GetCredential, RevokeCredential, IssueToken,
	GetQuotas, SetQuotas, ListTopicRules, CreateTopicRule, DeleteTopicRule,
	ListRetained, ListSessions, KickSession, GetLatency, GetUsage, ListTraces, GetTrace,
	ListInvoices, GetInvoice,
}
