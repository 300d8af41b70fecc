package shard

// poisonByte is what a shard in poisoning mode (Options.poisonFreed, set
// only by tests) writes over a buffer it gives back to a pool.
const poisonByte = 0xDB

// poison overwrites b, a buffer about to go back to a pool, when the shard
// runs in poisoning mode. A message, header or delivery still reading b
// then sees 0xDB bytes where its content was, instead of whatever the
// buffer's next user writes there (another client's, or another tenant's,
// message), and the tests' byte-exact payload checks catch it. Without
// the mode it does nothing.
func (s *Shard) poison(b []byte) {
	if !s.opts.poisonFreed {
		return
	}
	for i := range b {
		b[i] = poisonByte
	}
}
