package topic

import (
	"errors"
	"strings"
	"unicode/utf8"
)

// DefaultMaxLevels bounds the number of levels in a topic name or filter
// when a Config or a call does not set its own limit. The tree recurses
// once per level, so the bound also bounds stack depth.
const DefaultMaxLevels = 128

// maxLen is the longest UTF-8 encoded string MQTT can carry (§1.5.4).
const maxLen = 65535

// sharePrefix starts a shared subscription filter (v5 §4.8.2).
const sharePrefix = "$share/"

// Validation errors. Wrap them with the offending filter or name when
// reporting; the server maps them to reason code 0x8F (Topic Filter
// invalid) or 0x90 (Topic Name invalid).
var (
	ErrEmpty         = errors.New("topic: empty topic name or filter")
	ErrTooLong       = errors.New("topic: longer than 65535 bytes")
	ErrTooManyLevels = errors.New("topic: too many levels")
	ErrInvalidUTF8   = errors.New("topic: not valid UTF-8 or contains U+0000")
	ErrWildcardName  = errors.New("topic: wildcard in topic name")
	ErrMultiLevel    = errors.New("topic: '#' must be alone in the last level")
	ErrSingleLevel   = errors.New("topic: '+' must be alone in its level")
	ErrShareName     = errors.New("topic: invalid share name")
	ErrSharedNoLocal = errors.New("topic: No Local set on a shared subscription")
)

// Filter is a parsed, valid subscription filter.
type Filter struct {
	// Raw is the filter exactly as the client sent it, including any
	// $share/{ShareName}/ prefix. It identifies the subscription
	// [MQTT-3.8.4-3], [MQTT-3.10.4-1].
	Raw string
	// ShareName is the share group name, empty for a non-shared filter.
	ShareName string
	// Path is the part matched against topic names: Raw without the
	// $share/{ShareName}/ prefix.
	Path string
}

// Shared reports whether f is a shared subscription filter.
func (f Filter) Shared() bool { return f.ShareName != "" }

// ParseFilter validates a SUBSCRIBE or UNSUBSCRIBE topic filter and splits
// off a $share/{ShareName}/ prefix. maxLevels <= 0 means DefaultMaxLevels.
func ParseFilter(raw string, maxLevels int) (Filter, error) {
	f := Filter{Raw: raw, Path: raw}
	if err := checkString(raw); err != nil {
		return Filter{}, err
	}
	if rest, ok := strings.CutPrefix(raw, sharePrefix); ok {
		// [MQTT-4.8.2-1] a ShareName is at least one character long;
		// [MQTT-4.8.2-2] it contains no "/", "+" or "#" and is followed
		// by "/" and a topic filter.
		name, path, ok := strings.Cut(rest, "/")
		if !ok || name == "" || strings.ContainsAny(name, "+#") {
			return Filter{}, ErrShareName
		}
		f.ShareName, f.Path = name, path
	}
	if err := validateFilterPath(f.Path, maxLevels); err != nil {
		return Filter{}, err
	}
	return f, nil
}

// ValidateFilter reports whether raw is a valid filter; see ParseFilter.
func ValidateFilter(raw string, maxLevels int) error {
	_, err := ParseFilter(raw, maxLevels)
	return err
}

// validateFilterPath checks the wildcard rules of a (non-$share) filter.
func validateFilterPath(path string, maxLevels int) error {
	if maxLevels <= 0 {
		maxLevels = DefaultMaxLevels
	}
	// [MQTT-4.7.3-1] all topic names and filters are at least one
	// character long.
	if path == "" {
		return ErrEmpty
	}
	levels := 1
	start := 0
	for i := 0; i <= len(path); i++ {
		if i < len(path) && path[i] != '/' {
			continue
		}
		level := path[start:i]
		if strings.IndexByte(level, '#') >= 0 {
			// [MQTT-4.7.1-2] '#' must be the whole level and the last
			// character of the filter.
			if level != "#" || i != len(path) {
				return ErrMultiLevel
			}
		}
		// [MQTT-4.7.1-3] '+' must occupy an entire level.
		if strings.IndexByte(level, '+') >= 0 && level != "+" {
			return ErrSingleLevel
		}
		if i < len(path) {
			levels++
			if levels > maxLevels {
				return ErrTooManyLevels
			}
		}
		start = i + 1
	}
	return nil
}

// ValidateTopicName checks a PUBLISH topic name: non-empty, valid UTF-8
// without U+0000, no wildcards [MQTT-3.3.2-2], at most maxLevels levels
// (maxLevels <= 0 means DefaultMaxLevels). It does not allocate.
func ValidateTopicName(name []byte, maxLevels int) error {
	if maxLevels <= 0 {
		maxLevels = DefaultMaxLevels
	}
	if len(name) == 0 {
		return ErrEmpty // [MQTT-4.7.3-1]
	}
	if len(name) > maxLen {
		return ErrTooLong
	}
	levels := 1
	for _, c := range name {
		switch c {
		case '+', '#':
			return ErrWildcardName // [MQTT-3.3.2-2], [MQTT-4.7.0-1]
		case 0:
			return ErrInvalidUTF8 // [MQTT-4.7.3-2]
		case '/':
			levels++
			if levels > maxLevels {
				return ErrTooManyLevels
			}
		}
	}
	if !utf8.Valid(name) {
		return ErrInvalidUTF8 // [MQTT-1.5.4-1]
	}
	return nil
}

// checkString applies the UTF-8 string rules shared by names and filters.
func checkString(s string) error {
	if s == "" {
		return ErrEmpty // [MQTT-4.7.3-1]
	}
	if len(s) > maxLen {
		return ErrTooLong
	}
	// [MQTT-1.5.4-1] well-formed UTF-8; [MQTT-1.5.4-2], [MQTT-4.7.3-2]
	// no U+0000.
	if !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 {
		return ErrInvalidUTF8
	}
	return nil
}
