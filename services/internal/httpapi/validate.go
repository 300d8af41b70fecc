package httpapi

import (
	"maps"
	"net/mail"
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// slugPattern is a DNS label in lowercase (RFC 1123), the same rule as the
// tenants.slug CHECK constraint.
var slugPattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// reservedSlugs would make confusing or colliding endpoints.
var reservedSlugs = map[string]bool{
	"api": true, "www": true, "admin": true, "dashboard": true, "mqtt": true, "gateway": true, "status": true,
}

func checkSlug(v *validator, field, slug string) {
	switch {
	case !slugPattern.MatchString(slug):
		v.add(field, "must be a DNS label: 1 to 63 lowercase letters, digits and hyphens, not starting or ending with a hyphen")
	case reservedSlugs[slug]:
		v.add(field, "is reserved (the reserved slugs: "+strings.Join(slices.Sorted(maps.Keys(reservedSlugs)), ", ")+"); choose another")
	}
}

func checkEmail(v *validator, email string) {
	addr, err := mail.ParseAddress(email)
	switch {
	case email == "":
		v.add("email", "is required")
	case len(email) > 254 || err != nil || addr.Address != email || !strings.Contains(email, "@"):
		v.add("email", "must be a plain email address like name@example.com")
	}
}

// Password length bounds, in bytes.
const (
	minPassword = 10
	maxPassword = 256
)

func checkPassword(v *validator, password string) {
	switch {
	case len(password) < minPassword:
		v.add("password", "must be at least 10 characters")
	case len(password) > maxPassword:
		v.add("password", "must be at most 256 bytes")
	case !utf8.ValidString(password):
		v.add("password", "must be valid UTF-8")
	}
}

// checkName accepts a short human label: 1 to 128 characters, no control characters.
func checkName(v *validator, field, name string, required bool) {
	switch {
	case name == "" && required:
		v.add(field, "is required")
	case utf8.RuneCountInString(name) > 128:
		v.add(field, "must be at most 128 characters")
	case !utf8.ValidString(name) || strings.IndexFunc(name, unicode.IsControl) >= 0:
		v.add(field, "must be printable UTF-8 without control characters")
	}
}

// maxTopicBytes is the longest topic name or filter MQTT can encode.
const maxTopicBytes = 65535

// topicProblem returns why s is not a valid MQTT topic filter (or, when
// name is true, topic name), or "" when it is.
func topicProblem(s string, name bool) string {
	switch {
	case s == "":
		return "must not be empty" // [MQTT-4.7.3-1]
	case len(s) > maxTopicBytes:
		return "must be at most 65535 bytes" // [MQTT-4.7.3-3]
	case !utf8.ValidString(s):
		return "must be valid UTF-8" // [MQTT-1.5.4-1]
	case strings.ContainsRune(s, 0):
		return "must not contain U+0000" // [MQTT-4.7.3-2]
	}
	for rest := s; ; {
		level, tail, more := strings.Cut(rest, "/")
		if name {
			if strings.ContainsAny(level, "+#") {
				return "a topic name must not contain the wildcards + or #" // [MQTT-4.7.1-1]
			}
		} else {
			if strings.Contains(level, "#") && (level != "#" || more) {
				return "# must be a whole level and the last one" // [MQTT-4.7.1-2]
			}
			if strings.Contains(level, "+") && level != "+" {
				return "+ must be a whole level" // [MQTT-4.7.1-3]
			}
		}
		if !more {
			return ""
		}
		rest = tail
	}
}

func checkTopicFilter(v *validator, field, filter string) {
	if p := topicProblem(filter, false); p != "" {
		v.add(field, p)
	}
}
