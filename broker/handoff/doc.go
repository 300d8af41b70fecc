// Package handoff is the Unix-socket protocol by which a gateway hands a
// device's TCP socket to a broker node on the same host, so that the
// node serves the device directly and no relay sits between them
// (bench/README.md, "Handing the device's socket to a co-located node";
// docs/contracts.md, "Socket handoff").
//
// The node listens on a Unix stream socket (Listen, mode 0600; the peer's
// SO_PEERCRED uid must be the node's own or root) and the gateway keeps
// one connection to it open. The gateway has read nothing it keeps from
// the device: it peeked at the CONNECT (MSG_PEEK) to authenticate it, so
// the CONNECT is still in the socket and the node reads it as it reads
// one after a TCP hop's PROXY header.
//
// # Frames
//
// Every number is big-endian. These constants never change.
//
//	offset  size  field
//	     0     4  length of what follows (type and body), 1 … MaxFrame
//	     4     1  type
//	     5     -  body
//
//	type  name     direction       body
//	0x01  hello    node → gateway  flags 1 (bit 0: more hello frames
//	                               follow), node id length 1, node id,
//	                               then entries to the end: handoff id 8,
//	                               tenant id length 2, tenant id
//	0x02  handoff  gateway → node  handoff id 8, then the signed PROXY v2
//	                               header to the end, exactly as the
//	                               gateway would write it on TCP; the
//	                               device's socket as the frame's one
//	                               descriptor (SCM_RIGHTS)
//	0x03  taken    node → gateway  handoff id 8
//	0x04  refused  node → gateway  handoff id 8, reason 1
//	0x05  closed   node → gateway  handoff id 8
//	0x06  close    gateway → node  handoff id 8
//	0x07  credentials
//	               node → gateway  entries to the end: handoff id 8,
//	                               credential id length 1, credential id
//
// The node sends its hello first, before it reads anything: its id, and
// the handed-off connections it still serves that no connected gateway
// accounts for (a gateway that restarted counts them again), split over
// as many hello frames as MaxFrame needs, the last with bit 0 clear.
// When they list connections, credentials frames follow at once (as many
// as MaxFrame needs) naming each one's credential, so that the gateway
// that adopts them keeps watching for their revocation. The hello could
// not carry it compatibly (an older gateway refuses unknown flag bits and
// reads entries to the end of the body): an older gateway skips the frame
// type, and an older node sends none.
//
// Every handoff is answered once, taken or refused; a taken one is
// followed by closed when the connection ends, while this gateway
// connection lasts (or the next one's, after its hello listed it). A
// refused handoff's socket is closed by the node, which wrote nothing to
// it: the gateway still holds its own copy and serves the device
// otherwise (a TCP relay to the leader). Close asks the node to end a
// connection it took (the gateway's revocation backstop); the node ends
// it with DISCONNECT 0x87 and answers closed.
//
// A handoff id is the gateway's: unique among the connections the node
// still serves (a restarted gateway must not reuse the ids its hello
// listed).
//
// # Bounds
//
// A frame is at most MaxFrame bytes; its bytes, once the first has come,
// must all arrive within the reader's timeout. The descriptors that come
// with a frame's bytes are the frame's: a handoff takes exactly one, any
// other frame none; extra descriptors are closed, and a handoff whose
// control message was truncated (MSG_CTRUNC), or that came with no
// descriptor or more than one, is refused (RefusedBadDescriptor).
// Unknown frame types are skipped (their descriptors closed).
package handoff
