package handoff

import (
	"bytes"
	"testing"
)

// FuzzSplit: on any input the frame parser neither panics nor reads past
// a frame; every body it accepts encodes back to the same bytes.
func FuzzSplit(f *testing.F) {
	h, _ := AppendHellos(nil, "n1", []Live{{ID: 7, Tenant: "ten_a"}, {ID: 8, Tenant: ""}})
	f.Add(h)
	ho, _ := AppendHandoff(nil, 3, []byte("\r\n\r\n\x00\r\nQUIT\n!"))
	f.Add(ho)
	f.Add(AppendRefused(AppendID(nil, TypeTaken, 1), 2, RefusedBadHeader))
	f.Add(AppendID(nil, TypeClose, 5))
	cr, _ := AppendCredentials(h, []Live{{ID: 7, Credential: "cr_a"}, {ID: 8}})
	f.Add(cr)
	f.Add([]byte{0, 0, 0, 11, 7, 0, 0, 0, 0, 0, 0, 0, 1, 9, 'x'})
	f.Add([]byte{0, 0, 0, 2, 1, 1})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1})
	f.Fuzz(func(t *testing.T, in []byte) {
		for b := in; len(b) > 0; {
			typ, body, rest, err := Split(b)
			if err != nil {
				return
			}
			if consumed := len(b) - len(rest); consumed != prefixLen+len(body) || consumed > 4+MaxFrame {
				t.Fatalf("consumed %d for a body of %d", consumed, len(body))
			}
			frame := b[:len(b)-len(rest)]
			var again []byte
			switch typ {
			case TypeHello:
				id, more, live, err := ParseHello(body, nil)
				if err != nil {
					break
				}
				again, err = AppendHellos(nil, id, live)
				if err != nil {
					t.Fatalf("re-encoding a parsed hello: %v", err)
				}
				if more {
					again[5] = 1
				}
			case TypeHandoff:
				id, hdr, err := ParseHandoff(body)
				if err != nil {
					break
				}
				if again, err = AppendHandoff(nil, id, hdr); err != nil {
					t.Fatalf("re-encoding a parsed handoff: %v", err)
				}
			case TypeTaken, TypeClosed, TypeClose:
				if id, err := ParseID(body); err == nil {
					again = AppendID(nil, typ, id)
				}
			case TypeCredentials:
				live, err := ParseCredentials(body, nil)
				if err != nil || len(live) == 0 {
					break
				}
				if again, err = AppendCredentials(nil, live); err != nil {
					t.Fatalf("re-encoding parsed credentials: %v", err)
				}
			case TypeRefused:
				if id, r, err := ParseRefused(body); err == nil {
					again = AppendRefused(nil, id, r)
				}
			}
			if again != nil && !bytes.Equal(again, frame) {
				t.Fatalf("type %#x: read % x, encodes back as % x", typ, frame, again)
			}
			b = rest
		}
	})
}
