package shard

import "slices"

// SessionOwners returns the credential ids that own the shard's sessions,
// connected or offline, each once, sorted (the node checks them against
// Postgres: a session of a revoked or deleted credential is ended with
// EndSessionsOf). Sessions without an owner (standalone, or restored from
// a record written before owners were kept) are not counted.
func (s *Shard) SessionOwners() []string {
	s.mu.Lock()
	owners := make([]string, 0, len(s.sessions))
	for _, sess := range s.sessions {
		if sess.owner != "" {
			owners = append(owners, sess.owner)
		}
	}
	s.mu.Unlock()
	slices.Sort(owners)
	return slices.Compact(owners)
}
