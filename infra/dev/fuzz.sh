#!/usr/bin/env bash
# Runs every Go fuzz target in the workspace for the given time each.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
t=${1:-30s}
cd "$BERTH_ROOT"
grep -rl --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]+\(f \*testing\.F\)' . | sort | while read -r f; do
	dir=$(dirname "$f")
	for target in $(grep -oE '^func (Fuzz[A-Za-z0-9_]+)' "$f" | awk '{print $2}'); do
		log "fuzz $dir $target for $t"
		# Bounded minimisation: the default can stall past -fuzztime and hide a failure.
		go test -run '^$' -fuzz "^${target}\$" -fuzztime "$t" -fuzzminimizetime 200x "./$dir"
	done
done
