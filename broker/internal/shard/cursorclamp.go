package shard

// A session record names message-log offsets (its cursor, the position of
// its QoS 2 state) that can be durable before the records below them are:
// SUBSCRIBE and a disconnect save the cursor as of the log's next offset
// without waiting for the log's fsync, a failed fsync leaves records
// counted that never become durable, and a saved record can outlast
// proposals the tenant's group never committed. After a power cut the log
// recovers to its last durable record and the next records get the
// offsets of the lost ones: a position past the log's end would say the
// session has had them, and a later rebuild (rebuildPending) would skip
// them, acknowledged messages included. So load moves such positions
// down to the log's end and saves them before anything is appended: the
// messages lost were never acknowledged (-fsync always, replicated) or
// were lost by the policy in force (-fsync interval, never), and none
// after them is skipped. Cheaper than waiting for the fsync on every
// SUBSCRIBE and disconnect, and it covers every way a position can get
// ahead of the log.

// clampToLog moves sess's log positions down to end, the message log's
// next offset, and reports whether one was past it. Called by load.
func (sess *session) clampToLog(end uint64) bool {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if sess.cursor <= end && sess.q2pos <= end {
		return false
	}
	sess.cursor, sess.q2pos = min(sess.cursor, end), min(sess.q2pos, end)
	return true
}

// saveClamped saves the records of the sessions whose positions load
// moved down to the log's end: before anything is appended, so that the
// records appended next are not below a saved cursor after another crash.
func (s *Shard) saveClamped(list []*session) {
	if len(list) == 0 {
		return
	}
	s.opts.Logger.Warn("session cursors past the message log's end (records lost in a crash) moved to its end",
		"sessions", len(list), "log_end", s.log.NextOffset())
	s.saveCursors(list)
}
