package topic

import (
	"strings"
	"unicode/utf8"
)

// bruteMatch is the reference matcher: MQTT §4.7 read literally, with no
// tree. Property and fuzz tests compare Tree and Retained against it.
func bruteMatch(filter, topic string) bool {
	if strings.HasPrefix(topic, "$") && (filter[0] == '+' || filter[0] == '#') {
		return false // [MQTT-4.7.2-1]
	}
	fl := strings.Split(filter, "/")
	tl := strings.Split(topic, "/")
	for i, f := range fl {
		if f == "#" {
			return true // zero or more remaining levels
		}
		if i >= len(tl) || (f != "+" && f != tl[i]) {
			return false
		}
	}
	return len(fl) == len(tl)
}

// bruteValidPath is the reference validator for a non-shared filter.
func bruteValidPath(filter string) bool {
	if filter == "" || len(filter) > 65535 || !utf8.ValidString(filter) || strings.ContainsRune(filter, 0) {
		return false
	}
	levels := strings.Split(filter, "/")
	if len(levels) > DefaultMaxLevels {
		return false
	}
	for i, l := range levels {
		if strings.Contains(l, "#") && (l != "#" || i != len(levels)-1) {
			return false
		}
		if strings.Contains(l, "+") && l != "+" {
			return false
		}
	}
	return true
}
