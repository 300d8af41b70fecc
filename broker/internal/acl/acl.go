// Package acl enforces a device credential's access list on a broker node:
// the "acl" claim of its token, {"pub": [filters], "sub": [filters]}, which
// the gateway passes in the PROXY header.
//
// A PUBLISH is allowed when its topic matches one of the pub filters. A
// SUBSCRIBE filter is allowed when every topic it could match is matched by
// one of the sub filters (the requested filter is covered by an allowed one),
// so "sensors/#" admits "sensors/+/temp" but not "#". Shared subscriptions
// are judged by their inner filter. Checks allocate nothing.
package acl

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"berth.dev/broker/packet"
)

// ACL is one credential's access list.
type ACL struct {
	Pub []string `json:"pub"`
	Sub []string `json:"sub"`
}

// ErrInvalid is returned for an access list that cannot be parsed.
var ErrInvalid = errors.New("acl: invalid access list")

// Parse reads the JSON form of the acl claim. Every entry must be a valid
// topic filter: the API issues no other, and matching is defined only for
// those ("a/#/b" would otherwise grant all of "a/").
func Parse(b []byte) (*ACL, error) {
	var a ACL
	if err := json.Unmarshal(b, &a); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	for _, f := range append(a.Pub[:len(a.Pub):len(a.Pub)], a.Sub...) {
		if !packet.ValidTopicFilter([]byte(f)) {
			return nil, fmt.Errorf("%w: %q is not a topic filter", ErrInvalid, f)
		}
	}
	return &a, nil
}

// CanPublish reports whether topic may be published to.
func (a *ACL) CanPublish(topic []byte) bool {
	for _, f := range a.Pub {
		if covers(f, topic) {
			return true
		}
	}
	return false
}

// CanSubscribe reports whether filter may be subscribed to.
func (a *ACL) CanSubscribe(filter string) bool {
	if rest, ok := strings.CutPrefix(filter, "$share/"); ok {
		i := strings.IndexByte(rest, '/')
		if i < 0 {
			return false
		}
		filter = rest[i+1:]
	}
	for _, f := range a.Sub {
		if coversString(f, filter) {
			return true
		}
	}
	return false
}

// covers reports whether every topic matched by req (a topic name or a
// filter) is matched by allowed. It walks both level by level without
// splitting. A wildcard at the first level never covers a level starting
// with '$' [MQTT-4.7.2-1].
func covers[T string | []byte](allowed string, req T) bool {
	ai, ri := 0, 0
	first := true
	for {
		// The next level of each: [ai, aEnd) and [ri, rEnd).
		aEnd := indexFrom(allowed, ai)
		rEnd := indexFrom(req, ri)
		al := allowed[ai:aEnd]
		rl := req[ri:rEnd]
		switch {
		case al == "#":
			return !(first && len(rl) > 0 && rl[0] == '$')
		case al == "+":
			if len(rl) == 1 && rl[0] == '#' {
				return false
			}
			if first && len(rl) > 0 && rl[0] == '$' {
				return false
			}
		default:
			if string(rl) != al { // no allocation: compiler-optimized comparison
				return false
			}
		}
		first = false
		aDone, rDone := aEnd == len(allowed), rEnd == len(req)
		switch {
		case aDone && rDone:
			return true
		case rDone:
			// "a/#" also matches "a" [MQTT-4.7.1-2].
			return allowed[aEnd+1:] == "#"
		case aDone:
			return false
		}
		ai, ri = aEnd+1, rEnd+1
	}
}

func coversString(allowed, req string) bool { return covers(allowed, req) }

func indexFrom[T string | []byte](s T, from int) int {
	for i := from; i < len(s); i++ {
		if s[i] == '/' {
			return i
		}
	}
	return len(s)
}
