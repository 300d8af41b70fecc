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
	hello  []byte            // this node's liveness payload: its raft id (and draining flag)
	raftOf map[uint64]uint64 // transport id → raft id, as last announced
	peerOf map[uint64]uint64 // raft id → transport id
	// draining are the peers (transport ids) whose last liveness frame
	// said they drain (Host.SetDraining).
	draining map[uint64]bool
	// changes counts announcements of a raft id a peer did not have
	// before (Host.IdentityChanges).
	changes uint64
}

func (p *peerIDs) init(self uint64) {
	p.hello = binary.BigEndian.AppendUint64(nil, self)
	p.raftOf, p.peerOf = map[uint64]uint64{}, map[uint64]uint64{}
	p.draining = map[uint64]bool{}
}

// A draining node (Host.SetDraining) appends one byte, 1, to its raft id
// in its liveness frames: its peers' leaders then move the replicas it
// holds to other nodes (the caller's policy: PeerDraining). The frame is
// 8 bytes again when the drain ends; a node that knows only the 8-byte
// form ignores the 9-byte one and keeps the raft id it learned before.
const drainingFlag = 1

// SetDraining announces to every peer, now and in every liveness frame,
// whether this node drains.
func (h *Host) SetDraining(on bool) {
	h.mu.Lock()
	hello := binary.BigEndian.AppendUint64(nil, h.cfg.NodeID)
	if on {
		hello = append(hello, drainingFlag)
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

// PeerDraining reports whether the peer with transport id peer said in its
// last liveness frame that it drains.
func (h *Host) PeerDraining(peer uint64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ids.draining[peer]
}

// learnRaftID takes a liveness frame's payload from an authenticated peer.
func (h *Host) learnRaftID(from uint64, payload []byte) {
	if len(payload) != 8 && (len(payload) != 9 || payload[8] != drainingFlag) {
		return // a node that announces nothing: no raft message of it is taken
	}
	id, draining := binary.BigEndian.Uint64(payload), len(payload) == 9
	if id == 0 || id == h.cfg.NodeID {
		h.tr.badMessages.Add(1)
		return
	}
	h.mu.Lock()
	if h.ids.draining[from] != draining {
		h.ids.draining[from] = draining
		h.ids.changes++
		h.log.Info("replica: peer draining", "peer", from, "draining", draining)
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
// their draining flags: what a caller that
// reconciles configurations with the peers' ids watches.
func (h *Host) IdentityChanges() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ids.changes
}
