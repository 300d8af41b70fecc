package replica

import (
	"crypto/sha256"
	"encoding/binary"
)

// A node's raft id changes whenever it loses its raft state (its data
// directory is wiped or replaced): raft assumes a node never forgets its
// log or its votes, so a node that did must come back as a new member
// (Group.Replace), never under its old id. Its id on the peer transport
// (Config.PeerID, authenticated by the handshake) stays: every liveness
// frame a node sends carries its current raft id (8 bytes, big-endian;
// the frames were empty before, and a receiver that does not know the
// payload ignores it), and its peers route raft messages by it. A raft
// message is taken only when its From is the current raft id of the
// authenticated peer and its To is this node's raft id, so a message for
// a node's former incarnation never reaches the new one (it would find
// an empty log where raft expects the old one: the
// "tocommit(412) is out of range [lastIndex(1)]" panic).

// NameID is the id a name gets on this layer: a node id's on the peer
// transport and in raft, a tenant's group id. It is the first 8 bytes of
// the name's SHA-256, never 0 (raft's "none"), so every node computes the
// same. NEVER CHANGE: group and node ids are in every node's raft log.
func NameID(name string) uint64 {
	sum := sha256.Sum256([]byte(name))
	if id := binary.BigEndian.Uint64(sum[:8]); id != 0 {
		return id
	}
	return 1
}

// peerIDs maps the peers' transport ids to their current raft ids, both
// ways. Guarded by Host.mu.
type peerIDs struct {
	hello  []byte            // this node's liveness payload: its raft id (and flags)
	own    byte              // this node's announced flags (SetFlags)
	raftOf map[uint64]uint64 // transport id → raft id, as last announced
	peerOf map[uint64]uint64 // raft id → transport id
	// flags are the peers' (transport ids) flags as their last liveness
	// frame said (Host.SetFlags; FlagDraining: Host.SetDraining).
	flags map[uint64]byte
	// changes counts announcements of a raft id a peer did not have
	// before (Host.IdentityChanges).
	changes uint64
}

func (p *peerIDs) init(self uint64) {
	p.hello = binary.BigEndian.AppendUint64(nil, self)
	p.raftOf, p.peerOf = map[uint64]uint64{}, map[uint64]uint64{}
	p.flags = map[uint64]byte{}
}

// A node may announce flags besides its raft id: one byte after it in its
// liveness frames, never 0 (the frame is 8 bytes again when no flag is
// set). FlagDraining (1): it drains, its peers' leaders move the replicas
// it holds to other nodes (the caller's policy: PeerDraining). The other
// bits are the caller's (the node's rebalance, node/rebalance.go). A node
// that knows only the 8-byte form ignores the 9-byte one and keeps the
// raft id it learned before; one that knows only FlagDraining ignores a
// byte with other bits. NEVER CHANGE the meaning of a bit.
const FlagDraining byte = 1

// SetDraining announces to every peer, now and in every liveness frame,
// whether this node drains.
func (h *Host) SetDraining(on bool) {
	if on {
		h.SetFlags(FlagDraining, FlagDraining)
	} else {
		h.SetFlags(FlagDraining, 0)
	}
}

// SetFlags sets the bits of mask in this node's announced flags to those
// of value and announces them to every peer at once (when they changed)
// and in every liveness frame.
func (h *Host) SetFlags(mask, value byte) {
	h.mu.Lock()
	own := h.ids.own&^mask | value&mask
	if own == h.ids.own {
		h.mu.Unlock()
		return
	}
	h.ids.own = own
	hello := binary.BigEndian.AppendUint64(nil, h.cfg.NodeID)
	if own != 0 {
		hello = append(hello, own)
	}
	h.ids.hello = hello // replaced, never changed in place: sends of the old one stay valid
	peers := make([]uint64, 0, len(h.seen))
	for id := range h.seen {
		peers = append(peers, id)
	}
	h.mu.Unlock()
	for _, id := range peers {
		h.tr.send(id, kindAlive, 0, hello)
	}
}

// Flags are this node's announced flags (SetFlags).
func (h *Host) Flags() byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ids.own
}

// PeerDraining reports whether the peer with transport id peer said in its
// last liveness frame that it drains.
func (h *Host) PeerDraining(peer uint64) bool {
	return h.PeerFlags(peer)&FlagDraining != 0
}

// PeerFlags are the flags the peer with transport id peer announced in its
// last liveness frame (0: none, or no frame yet).
func (h *Host) PeerFlags(peer uint64) byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ids.flags[peer]
}

// learnRaftID takes a liveness frame's payload from an authenticated peer.
func (h *Host) learnRaftID(from uint64, payload []byte) {
	if len(payload) != 8 && (len(payload) != 9 || payload[8] == 0) {
		return // a node that announces nothing: no raft message of it is taken
	}
	id, flags := binary.BigEndian.Uint64(payload), byte(0)
	if len(payload) == 9 {
		flags = payload[8]
	}
	if id == 0 || id == h.cfg.NodeID {
		h.tr.badMessages.Add(1)
		return
	}
	h.mu.Lock()
	if was := h.ids.flags[from]; was != flags {
		h.ids.flags[from] = flags
		h.ids.changes++
		if (was^flags)&FlagDraining != 0 {
			h.log.Info("replica: peer draining", "peer", from, "draining", flags&FlagDraining != 0)
		}
	}
	was := h.ids.raftOf[from]
	if was == id {
		h.mu.Unlock()
		return
	}
	if other, ok := h.ids.peerOf[id]; ok && other != from {
		h.mu.Unlock()
		h.tr.badMessages.Add(1)
		h.log.Warn("replica: two peers announce one raft id", "peer", from, "other", other, "raft_id", id)
		return
	}
	delete(h.ids.peerOf, was)
	h.ids.raftOf[from], h.ids.peerOf[id] = id, from
	h.ids.changes++
	h.mu.Unlock()
	h.log.Info("replica: peer raft id", "peer", from, "raft_id", id, "was", was)
}

// peerKey is the transport id of the node whose current raft id is id; 0
// (no such peer: the send is dropped and counted) for a raft id no peer
// announces, such as a former incarnation's.
func (h *Host) peerKey(id uint64) uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ids.peerOf[id]
}

// PeerRaftID is the raft id the peer with transport id peer last
// announced; false when it has announced none yet.
func (h *Host) PeerRaftID(peer uint64) (uint64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	id, ok := h.ids.raftOf[peer]
	return id, ok
}

// IdentityChanges counts the raft ids peers announced that they did not
// have before (their first announcement included), and the changes of
// their flags (SetFlags): what a caller that
// reconciles configurations with the peers' ids watches.
func (h *Host) IdentityChanges() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ids.changes
}
