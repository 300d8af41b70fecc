//go:build race

package shard

// raceEnabled: the race detector's instrumentation deepens stacks.
const raceEnabled = true
