package memtrim

import (
	"runtime/metrics"
	"strings"
)

// Classes reads the runtime's memory classes (every /memory/classes/
// metric: heap objects, free, released, unused, stacks, metadata, os-stacks,
// other, ...), the live heap as of the last collection, the bytes allocated
// so far, the collections and the goroutines, as slog key/value pairs (name
// without its unit, value in bytes or counts).
func Classes() []any {
	var samples []metrics.Sample
	for _, d := range metrics.All() {
		if strings.HasPrefix(d.Name, "/memory/classes/") || d.Name == "/gc/heap/live:bytes" ||
			d.Name == "/gc/heap/allocs:bytes" || d.Name == "/gc/cycles/total:gc-cycles" ||
			d.Name == "/sched/goroutines:goroutines" {
			samples = append(samples, metrics.Sample{Name: d.Name})
		}
	}
	metrics.Read(samples)
	out := make([]any, 0, 2*len(samples))
	for _, s := range samples {
		if s.Value.Kind() != metrics.KindUint64 {
			continue
		}
		name, _, _ := strings.Cut(s.Name, ":")
		out = append(out, strings.TrimPrefix(name, "/"), s.Value.Uint64())
	}
	return out
}
