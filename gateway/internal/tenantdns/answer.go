package tenantdns

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"berth.dev/gateway/internal/route"
)

// Routes is what the responder needs of the route table
// (*route.Table): a tenant's route by its slug, from the cache alone
// (CachedSlug, ok false when it would need Postgres) or reading Postgres
// when needed (LookupSlug).
type Routes interface {
	CachedSlug(slug string) (r route.Route, err error, ok bool)
	LookupSlug(ctx context.Context, slug string) (route.Route, error)
}

// Sizes (RFC 1035 section 4.2.1, RFC 6891 section 6.2.5).
const (
	udpPlain   = 512  // a UDP answer without EDNS
	udpEDNSMax = 1232 // the most we send over UDP whatever EDNS offers (DNS flag day 2020)
	tcpMax     = 65535
)

// lookupTimeout bounds a route lookup behind one query, its wait for a
// lookup slot included; a resolver retries sooner than that anyway.
const lookupTimeout = 2 * time.Second

// maxNegativeTTL caps the SOA MINIMUM, the time resolvers keep an
// NXDOMAIN (RFC 2308): a tenant created under a name probed before is
// reachable within it, whatever -dns-ttl.
const maxNegativeTTL = 60

// acmeLabel is the host label of the ACME DNS-01 challenge (RFC 8555
// section 8.4) of the wildcard certificate *.<zone>.
const acmeLabel = "_acme-challenge"

// target is what a name answers: an address (A or AAAA) or a name (CNAME).
type target struct {
	addr netip.Addr
	name dnsmessage.Name
}

func parseTarget(h string) (target, error) {
	if a, err := netip.ParseAddr(h); err == nil {
		return target{addr: a.Unmap()}, nil
	}
	n, err := dnsmessage.NewName(canonical(h))
	return target{name: n}, err
}

// Responder answers queries for one zone. Answer is safe for concurrent use.
type Responder struct {
	zone     string // canonical
	zoneName dnsmessage.Name
	ttl      uint32
	ns       []dnsmessage.Name
	soa      dnsmessage.SOAResource
	fallback target
	acme     dnsmessage.Name // Config.ACMECNAME; Length 0 when unset
	lookups  *lookups
	log      *slog.Logger
	loggedAt atomic.Int64 // unix nanoseconds of the last lookup failure logged
}

// NewResponder returns the responder of a validated cfg.
func NewResponder(cfg Config, routes Routes, log *slog.Logger) (*Responder, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Responder{zone: canonical(cfg.Zone), ttl: uint32(cfg.TTL / time.Second), lookups: newLookups(routes), log: log}
	var err error
	if r.zoneName, err = dnsmessage.NewName(r.zone); err != nil {
		return nil, err
	}
	for _, n := range cfg.nameServers() {
		name, err := dnsmessage.NewName(canonical(n))
		if err != nil {
			return nil, err
		}
		r.ns = append(r.ns, name)
	}
	if len(r.ns) == 0 {
		return nil, errors.New("tenantdns: no name servers")
	}
	mbox, err := dnsmessage.NewName("hostmaster." + r.zone)
	if err != nil {
		return nil, err
	}
	r.soa = dnsmessage.SOAResource{NS: r.ns[0], MBox: mbox, Serial: 1, Refresh: 3600, Retry: 600, Expire: 86400, MinTTL: min(r.ttl, maxNegativeTTL)}
	if r.fallback, err = parseTarget(cfg.Fallback); err != nil {
		return nil, err
	}
	if cfg.ACMECNAME != "" {
		if r.acme, err = dnsmessage.NewName(canonical(cfg.ACMECNAME)); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// query is one parsed question and how to answer it.
type query struct {
	hdr     dnsmessage.Header // of the response
	q       dnsmessage.Question
	edns    bool
	max     int // largest response
	extCode dnsmessage.RCode
	// cachedOnly: answer only if no Postgres lookup is needed; when one
	// is, deferred is set and no response built.
	cachedOnly, deferred bool
}

// Answer returns the response to the query msg received over TCP (tcp) or
// UDP, built in buf (reused), or nil when msg gets no answer: its header
// is unreadable or it is itself a response.
func (r *Responder) Answer(ctx context.Context, msg []byte, tcp bool, buf []byte) []byte {
	resp, _ := r.respond(ctx, msg, tcp, buf, false)
	return resp
}

// AnswerCached is Answer when the response needs no Postgres lookup (the
// tenant's route is cached, or the name is no tenant's): it never blocks.
// ok is false, and nothing built, when it would need one: Answer it then.
func (r *Responder) AnswerCached(msg []byte, tcp bool, buf []byte) (resp []byte, ok bool) {
	return r.respond(context.Background(), msg, tcp, buf, true)
}

func (r *Responder) respond(ctx context.Context, msg []byte, tcp bool, buf []byte, cachedOnly bool) ([]byte, bool) {
	var p dnsmessage.Parser
	h, err := p.Start(msg)
	if err != nil || h.Response {
		return nil, true
	}
	qr := query{hdr: dnsmessage.Header{ID: h.ID, Response: true, OpCode: h.OpCode, RecursionDesired: h.RecursionDesired},
		max: udpPlain, cachedOnly: cachedOnly}
	if tcp {
		qr.max = tcpMax
	}
	// The sections are read first, whatever the opcode or the number of
	// questions: an OPT in the query is answered with one, an error too
	// (RFC 6891 section 7).
	qs, err := p.AllQuestions()
	code := dnsmessage.RCodeFormatError
	if err == nil {
		code = readEDNS(&p, &qr, tcp)
	}
	switch {
	case h.OpCode != 0: // only QUERY (RFC 1035 section 4.1.1)
		qr.hdr.RCode, qr.extCode = dnsmessage.RCodeNotImplemented, 0
	case len(qs) != 1:
		qr.hdr.RCode, qr.extCode = dnsmessage.RCodeFormatError, 0
	case code != dnsmessage.RCodeSuccess:
		qr.q, qr.hdr.RCode, qr.extCode = qs[0], code, 0
	case qr.extCode != 0: // BADVERS: the question and OPT only
		qr.q = qs[0]
	default:
		qr.q = qs[0]
		return r.build(ctx, buf, &qr, r.answer)
	}
	return r.build(ctx, buf, &qr, nil)
}

// answer decides the response to a well-formed query; it sets the RCODE
// and authority bit in qr.hdr.
func (r *Responder) answer(ctx context.Context, qr *query) sections {
	q := qr.q
	if q.Class != dnsmessage.ClassINET && q.Class != dnsmessage.ClassANY {
		qr.hdr.RCode = dnsmessage.RCodeRefused
		return sections{}
	}
	name := asciiLower(q.Name.String())
	var label string
	switch {
	case name == r.zone:
	case strings.HasSuffix(name, "."+r.zone):
		label = name[:len(name)-len(r.zone)-1]
	default: // not ours (RFC 1035 section 4.3.1: no recursion)
		qr.hdr.RCode = dnsmessage.RCodeRefused
		return sections{}
	}
	qr.hdr.Authoritative = true
	if q.Type == dnsmessage.TypeAXFR || q.Type == 251 /* IXFR */ {
		qr.hdr.RCode = dnsmessage.RCodeRefused
		return sections{}
	}
	if label == "" {
		return r.apex(qr)
	}
	if label == acmeLabel && r.acme.Length > 0 {
		return r.point(qr, target{name: r.acme})
	}
	if !validSlug(label) { // deeper names and non-slugs exist nowhere
		return r.nxdomain(qr)
	}
	rt, err, ok := r.lookups.cached(label)
	if !ok {
		if qr.cachedOnly {
			qr.deferred = true
			return sections{}
		}
		ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
		defer cancel()
		rt, err = r.lookups.lookup(ctx, label)
	}
	switch {
	case errors.Is(err, route.ErrNoTenant):
		return r.nxdomain(qr)
	case errors.Is(err, route.ErrNotPlaced): // the gateways behind the fallback answer it
		return r.point(qr, r.fallback)
	case err != nil:
		r.logFailure(label, err)
		qr.hdr.RCode = dnsmessage.RCodeServerFailure
		qr.hdr.Authoritative = false
		return sections{}
	case rt.PublicHost == "":
		return r.point(qr, r.fallback)
	}
	t, err := parseTarget(rt.PublicHost)
	if err != nil { // nodes validate it; a hand-written row may not be
		r.logFailure(label, err)
		t = r.fallback
	}
	return r.point(qr, t)
}

// point answers the name qr.q.Name with t: a CNAME for any type, or
// its address for A / AAAA / ANY, NODATA for other types.
func (r *Responder) point(qr *query, t target) sections {
	h := dnsmessage.ResourceHeader{Name: qr.q.Name, Class: dnsmessage.ClassINET, TTL: r.ttl}
	qt := qr.q.Type
	switch {
	case t.name.Length > 0:
		h.Type = dnsmessage.TypeCNAME
		return sections{answers: []dnsmessage.Resource{{Header: h, Body: &dnsmessage.CNAMEResource{CNAME: t.name}}}}
	case t.addr.Is4() && (qt == dnsmessage.TypeA || qt == dnsmessage.TypeALL):
		h.Type = dnsmessage.TypeA
		return sections{answers: []dnsmessage.Resource{{Header: h, Body: &dnsmessage.AResource{A: t.addr.As4()}}}}
	case t.addr.Is6() && (qt == dnsmessage.TypeAAAA || qt == dnsmessage.TypeALL):
		h.Type = dnsmessage.TypeAAAA
		return sections{answers: []dnsmessage.Resource{{Header: h, Body: &dnsmessage.AAAAResource{AAAA: t.addr.As16()}}}}
	}
	return sections{authority: []dnsmessage.Resource{r.soaRecord(r.soa.MinTTL)}} // NODATA
}

// apex answers the zone's own name: SOA, NS (both for ANY), else NODATA.
func (r *Responder) apex(qr *query) sections {
	var s sections
	if qr.q.Type == dnsmessage.TypeSOA || qr.q.Type == dnsmessage.TypeALL {
		s.answers = append(s.answers, r.soaRecord(r.ttl))
	}
	if qr.q.Type == dnsmessage.TypeNS || qr.q.Type == dnsmessage.TypeALL {
		for _, ns := range r.ns {
			h := dnsmessage.ResourceHeader{Name: r.zoneName, Type: dnsmessage.TypeNS, Class: dnsmessage.ClassINET, TTL: r.ttl}
			s.answers = append(s.answers, dnsmessage.Resource{Header: h, Body: &dnsmessage.NSResource{NS: ns}})
		}
	}
	if len(s.answers) == 0 {
		s.authority = []dnsmessage.Resource{r.soaRecord(r.soa.MinTTL)}
	}
	return s
}

// nxdomain: the name does not exist; the SOA in authority bounds how long
// resolvers cache that (RFC 2308).
func (r *Responder) nxdomain(qr *query) sections {
	qr.hdr.RCode = dnsmessage.RCodeNameError
	return sections{authority: []dnsmessage.Resource{r.soaRecord(r.soa.MinTTL)}}
}

// soaRecord is the zone's SOA with TTL ttl: -dns-ttl in an answer, the
// negative TTL in the authority section of NXDOMAIN and NODATA (RFC 2308
// section 3: the lesser of the SOA's TTL and its MINIMUM).
func (r *Responder) soaRecord(ttl uint32) dnsmessage.Resource {
	h := dnsmessage.ResourceHeader{Name: r.zoneName, Type: dnsmessage.TypeSOA, Class: dnsmessage.ClassINET, TTL: ttl}
	soa := r.soa
	return dnsmessage.Resource{Header: h, Body: &soa}
}

// logFailure logs a failed lookup at most once a second.
func (r *Responder) logFailure(slug string, err error) {
	now := time.Now().UnixNano()
	if last := r.loggedAt.Load(); now-last >= int64(time.Second) && r.loggedAt.CompareAndSwap(last, now) {
		r.log.Warn("dns: tenant lookup failed (SERVFAIL or fallback)", "slug", slug, "err", err)
	}
}

// validSlug tells whether l can be a tenant slug (tenants.slug's CHECK:
// lower case letters, digits and inner hyphens, 1 to 63); l is lower case.
func validSlug(l string) bool {
	if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
		return false
	}
	for i := 0; i < len(l); i++ {
		if b := l[i]; !(b >= 'a' && b <= 'z' || b >= '0' && b <= '9' || b == '-') {
			return false
		}
	}
	return true
}

// asciiLower folds A-Z only: DNS names compare case-insensitively in ASCII
// (RFC 4343); other bytes stay as they are.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
