package topic

// MatchFilter reports whether the topic name matches filter, a valid
// non-shared filter (no $share/ prefix; see ValidateFilter), by the rules
// the Tree applies (MQTT 5.0 section 4.7). It is for a handful of filters
// checked one by one (a tenant's topic rules); many subscriptions belong in
// a Tree. It does not allocate.
func MatchFilter(filter string, name []byte) bool {
	if len(name) == 0 || len(filter) == 0 {
		return false
	}
	// [MQTT-4.7.2-1] a filter starting with a wildcard does not match a
	// topic name starting with '$'.
	if name[0] == '$' && (filter[0] == '+' || filter[0] == '#') {
		return false
	}
	f, t := 0, 0 // start of the current level in filter and name
	for {
		fe := f
		for fe < len(filter) && filter[fe] != '/' {
			fe++
		}
		level := filter[f:fe]
		if level == "#" {
			// [MQTT-4.7.1-2] the parent level and any number of child
			// levels: "sport/#" matches "sport" too.
			return true
		}
		te := t
		for te < len(name) && name[te] != '/' {
			te++
		}
		// [MQTT-4.7.1-3] '+' matches exactly one level, an empty one too.
		if level != "+" && level != string(name[t:te]) {
			return false
		}
		lastF, lastT := fe == len(filter), te == len(name)
		switch {
		case lastF && lastT:
			return true
		case lastF:
			return false // the name has more levels
		case lastT:
			// The filter has more levels: only "/#" can still match.
			return filter[fe+1:] == "#"
		}
		f, t = fe+1, te+1
	}
}
