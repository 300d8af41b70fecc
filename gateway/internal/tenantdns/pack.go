package tenantdns

import (
	"context"
	"errors"

	"golang.org/x/net/dns/dnsmessage"
)

// readEDNS reads the sections after the question and records an OPT
// record (RFC 6891): its UDP size raises qr.max, an unknown version is
// BADVERS. It returns FORMERR for unreadable sections or a second OPT.
func readEDNS(p *dnsmessage.Parser, qr *query, tcp bool) dnsmessage.RCode {
	if p.SkipAllAnswers() != nil || p.SkipAllAuthorities() != nil {
		return dnsmessage.RCodeFormatError
	}
	for {
		rh, err := p.AdditionalHeader()
		if errors.Is(err, dnsmessage.ErrSectionDone) {
			return dnsmessage.RCodeSuccess
		}
		if err != nil {
			return dnsmessage.RCodeFormatError
		}
		if rh.Type == dnsmessage.TypeOPT {
			if qr.edns || rh.Name.Length != 1 { // one OPT, owned by the root
				return dnsmessage.RCodeFormatError
			}
			qr.edns = true
			if size := int(rh.Class); !tcp && size > qr.max {
				qr.max = min(size, udpEDNSMax)
			}
			if rh.TTL>>16&0xff != 0 { // version (RFC 6891 section 6.1.3)
				qr.extCode = 16 // BADVERS
			}
		}
		if p.SkipAdditional() != nil {
			return dnsmessage.RCodeFormatError
		}
	}
}

// sections is what a response carries after its question.
type sections struct {
	answers, authority []dnsmessage.Resource
}

// build writes the response: the question (when there is one), the
// sections fill returns (nil: none) and an OPT when the query had one. A
// response over qr.max is sent again as the header, question and OPT with
// TC set (RFC 2181 section 9).
func (r *Responder) build(ctx context.Context, buf []byte, qr *query, fill func(context.Context, *query) sections) ([]byte, bool) {
	var s sections
	if fill != nil {
		if s = fill(ctx, qr); qr.deferred {
			return nil, false
		}
	}
	msg := r.pack(buf, qr, s)
	if len(msg) > qr.max {
		qr.hdr.Truncated = true
		msg = r.pack(buf, qr, sections{})
	}
	return msg, true
}

func (r *Responder) pack(buf []byte, qr *query, s sections) []byte {
	b := dnsmessage.NewBuilder(buf[:0], qr.hdr)
	b.EnableCompression()
	var err error
	if qr.q.Name.Length > 0 {
		err = errors.Join(b.StartQuestions(), b.Question(qr.q))
	}
	err = errors.Join(err, b.StartAnswers())
	for _, rr := range s.answers {
		err = errors.Join(err, add(&b, rr))
	}
	err = errors.Join(err, b.StartAuthorities())
	for _, rr := range s.authority {
		err = errors.Join(err, add(&b, rr))
	}
	if qr.edns {
		var opt dnsmessage.ResourceHeader
		err = errors.Join(err, b.StartAdditionals(), opt.SetEDNS0(udpEDNSMax, qr.extCode, false),
			b.OPTResource(opt, dnsmessage.OPTResource{}))
	}
	msg, ferr := b.Finish()
	if err = errors.Join(err, ferr); err != nil { // names are checked up front: not expected
		r.log.Error("dns: building a response", "err", err)
		return nil
	}
	return msg
}

func add(b *dnsmessage.Builder, rr dnsmessage.Resource) error {
	switch body := rr.Body.(type) {
	case *dnsmessage.AResource:
		return b.AResource(rr.Header, *body)
	case *dnsmessage.AAAAResource:
		return b.AAAAResource(rr.Header, *body)
	case *dnsmessage.CNAMEResource:
		return b.CNAMEResource(rr.Header, *body)
	case *dnsmessage.NSResource:
		return b.NSResource(rr.Header, *body)
	case *dnsmessage.SOAResource:
		return b.SOAResource(rr.Header, *body)
	}
	return errors.New("tenantdns: unexpected record")
}
