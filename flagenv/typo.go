package flagenv

import (
	"fmt"
	"sort"
	"strings"
)

// Typo is a variable no flag reads that looks like a misspelling of one
// that a flag does.
type Typo struct {
	Var  string // as found in the environment
	Want string // the variable it is probably meant to be
	Flag string // the flag Want fills
}

func (t Typo) String() string {
	return fmt.Sprintf("environment variable %s is not read; did you mean %s (-%s)?", t.Var, t.Want, t.Flag)
}

// Typos looks at environ (os.Environ(): NAME=value) for variables under
// the rule's Watch prefix (any case) that no flag reads but that are a
// small edit (a letter missing, added, changed or two swapped; a
// different case) away from one that a flag does. Variables of other
// programs under the same prefix are left alone unless they are that
// close.
func (r Report) Typos(environ []string) []Typo {
	var out []Typo
	watch := strings.ToUpper(r.watch)
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		up := strings.ToUpper(name)
		if _, ok := r.known[name]; ok || watch == "" || !strings.HasPrefix(up, watch) {
			continue
		}
		best, bestD := "", -1
		for v := range r.known {
			if !strings.HasPrefix(v, r.watch) {
				continue
			}
			tail := v[len(r.watch):]
			limit := 2
			if len(tail) <= 5 {
				limit = 1
			}
			d := distance(up[len(watch):], strings.ToUpper(tail), limit)
			if d <= limit && (bestD < 0 || d < bestD || d == bestD && v < best) {
				best, bestD = v, d
			}
		}
		if bestD >= 0 {
			out = append(out, Typo{Var: name, Want: best, Flag: r.known[best]})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Var < out[j].Var })
	return out
}

// distance is the optimal string alignment distance of a and b (edits:
// insert, delete, substitute, swap two adjacent bytes), or limit+1 when
// it is beyond limit.
func distance(a, b string, limit int) int {
	if d := len(a) - len(b); d > limit || -d > limit {
		return limit + 1
	}
	// Three rows of the dynamic-programming table: i-2, i-1, i.
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		rowMin := cur[0]
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
			rowMin = min(rowMin, cur[j])
		}
		if rowMin > limit {
			return limit + 1
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return min(prev[len(b)], limit+1)
}
