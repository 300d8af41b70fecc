package node

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"berth.dev/broker/internal/replica"
	"berth.dev/broker/internal/store"
	"berth.dev/broker/internal/wal"
)

// A replica removed from its group (docs/replication.md, "Removed
// replicas"): a drain's move, a plan's lower factor. Once this node has
// applied a configuration it is no member of (replica.Group.Removed: the
// removal is committed, so the group needs nothing from this copy any
// more), leadLoop cleans up:
//
//  1. the group leaves r.groups and is marked removed here (no CONNECT, no
//     scan opens it again meanwhile);
//  2. its loop stops and its raft log closes, in the loop's turn that
//     finds the removal applied and no configuration change after it in
//     the log (replica.Host.RetireGroup); one there (its leader added it
//     back, and it may have acknowledged entries since: deleting them
//     would leave the leader counting entries it no longer has) puts the
//     group back, running;
//  3. a tombstone <data>/raft/removed/<group id> holding the tenant id is
//     written (temp, fsync, rename, fsync directory);
//  4. the tenant's store is closed, the raft directory
//     <data>/raft/<group id> and the tenant's store directory deleted.
//
// Crash-safe: before the tombstone, a restart replays the raft log, which
// applies the removal again, and the cleanup runs again; after it, the
// start (sweepRemoved) deletes whatever of the two directories is left and
// never opens the group. A tombstoned group opens again only when its
// leader sends this node a leader's message (it was added back as a
// learner: replica.Host.Asked) and the node is one of the tenant's
// replicas by placement (reopenAsked): what is left of the copy is deleted
// first (a deletion that failed in step 4 left part of it: a log missing
// entries, a HardState committing entries it does not hold), and the
// group stays tombstoned while that fails; the deletions are made durable
// (fsync of <data>/raft and <data>), then the tombstone is removed and
// <data>/raft/removed fsynced, and only then the group opens empty and is
// caught up by snapshot like any new member. Were the tombstone's removal
// not durable before the group opens, a power loss could bring it back
// after the member had caught up, voted and acknowledged entries, and the
// next start (sweepRemoved) would delete a copy its leader counts on.

// copyWarnEvery spaces reopenAsked's warnings about a copy it cannot
// delete (it tries again on every leader's message).
const copyWarnEvery = time.Minute

// removedDir holds the tombstones of the groups removed from this node.
func (r *replicas) removedDir() string {
	return filepath.Join(r.n.cfg.DataDir, "raft", "removed")
}

func (r *replicas) tombstone(gid uint64) string {
	return filepath.Join(r.removedDir(), strconv.FormatUint(gid, 10))
}

// isRemoved reports whether the tenant's group was removed from this node
// and not added back since. Called with r.mu held or not: it reads the
// disk only.
func (r *replicas) isRemoved(tenantID string) bool {
	_, err := os.Stat(r.tombstone(replica.NameID(tenantID)))
	return err == nil
}

// cleanUpRemoved runs the cleanup above for rg when its group removed this
// node; it reports whether it did. Called from leadLoop.
func (r *replicas) cleanUpRemoved(rg *replGroup) bool {
	if !rg.g.Removed() || rg.state.Load() != following {
		return false
	}
	if _, open := r.n.lookup(rg.id); open {
		return false // its shard is still being stepped down
	}
	gid := rg.g.ID()
	r.mu.Lock()
	if r.groups[rg.id] != rg {
		r.mu.Unlock()
		return false
	}
	delete(r.groups, rg.id)
	r.removing[rg.id] = true
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.removing, rg.id)
		r.mu.Unlock()
	}()
	log := r.n.log.With("tenant_id", rg.id, "group", gid)
	retired, err := r.host.RetireGroup(gid)
	if !retired && err == nil {
		// Its log holds a change not applied yet (its leader added it
		// back, and it may have acknowledged entries since): it runs on.
		r.mu.Lock()
		r.groups[rg.id] = rg
		r.mu.Unlock()
		return false
	}
	if !retired {
		// Its loop stopped on an error: the copy stays whole, and the next
		// start (or scan) opens it from its log and judges it again.
		log.Error("replication: removed replica: its group stopped before it could be retired", "err", err)
		if err := errors.Join(r.host.CloseGroup(gid), rg.log.Close()); err != nil {
			log.Warn("replication: removed replica: closing", "err", err)
		}
		return true
	}
	if err := wal.WriteFileAtomic(r.removalFS, r.tombstone(gid), []byte(rg.id+"\n")); err != nil {
		// Without a tombstone the copy must stay whole: the group is
		// closed and the next start (or scan) opens it from its log and
		// finds it removed again.
		log.Error("replication: removed replica: writing its tombstone", "err", err)
		if err := rg.log.Close(); err != nil {
			log.Warn("replication: removed replica: closing", "err", err)
		}
		return true
	}
	if err := rg.log.Close(); err != nil {
		log.Warn("replication: removed replica: closing", "err", err)
	}
	if err := r.removeCopy(gid, rg.id); err != nil {
		r.copyErrors.Add(1)
		log.Warn("replication: removed replica: deleting its copy (the next start, or a re-addition, finishes; it stays tombstoned until then)", "err", err)
		return true
	}
	log.Info("replication: this node was removed from the tenant's group; its copy is deleted", "config_index", rg.g.ConfIndex())
	return true
}

// sweepRemoved deletes what a crash left of removed groups' copies: the
// raft and store directories of every tombstone. Run at start, before any
// group opens.
func (r *replicas) sweepRemoved() error {
	entries, err := os.ReadDir(r.removedDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		gid, err := strconv.ParseUint(e.Name(), 10, 64)
		if err != nil {
			continue // a temp file of an interrupted write
		}
		b, err := os.ReadFile(filepath.Join(r.removedDir(), e.Name()))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, r.removeCopy(gid, strings.TrimSpace(string(b))))
	}
	return errors.Join(errs...)
}

// removeCopy deletes group gid's raft directory and, when tenantID names
// that group, the tenant's store directory.
func (r *replicas) removeCopy(gid uint64, tenantID string) error {
	err := r.host.RemoveGroupData(gid)
	if tenantID != "" && replica.NameID(tenantID) == gid {
		err = errors.Join(err, store.RemoveTenant(r.n.cfg.DataDir, tenantID))
	}
	return err
}

// clearTombstone readies a removed group to open again: what is left of
// its copy is deleted and the deletions made durable, then its tombstone
// is removed durably (see the top of this file for the power loss this
// order guards against). On an error the tombstone stays, whatever else
// went.
func (r *replicas) clearTombstone(gid uint64, tenantID string) error {
	if err := r.removeCopy(gid, tenantID); err != nil {
		return err
	}
	raftDir := filepath.Dir(r.removedDir())
	if err := errors.Join(wal.SyncDir(r.removalFS, raftDir), wal.SyncDir(r.removalFS, r.n.cfg.DataDir)); err != nil {
		return err
	}
	return wal.RemoveFile(r.removalFS, r.tombstone(gid))
}

// removedTenants lists the tenants whose group was removed from this node.
func (r *replicas) removedTenants() []string {
	entries, err := os.ReadDir(r.removedDir())
	if err != nil {
		return nil
	}
	var ids []string
	for _, e := range entries {
		if _, err := strconv.ParseUint(e.Name(), 10, 64); err != nil {
			continue
		}
		if b, err := os.ReadFile(filepath.Join(r.removedDir(), e.Name())); err == nil {
			ids = append(ids, strings.TrimSpace(string(b)))
		}
	}
	return ids
}

// reopenAsked opens again the removed groups whose leader wants this node
// back (it sends it appends or a snapshot), when this node is one of the
// tenant's replicas by placement (designated or wanted), once what is
// left of their copy is deleted (clearTombstone). Called from leadLoop.
func (r *replicas) reopenAsked() {
	for _, gid := range r.host.Asked() {
		b, err := os.ReadFile(r.tombstone(gid))
		if err != nil {
			continue // not removed here: a group this node never held, or one opening
		}
		tenantID := strings.TrimSpace(string(b))
		if replica.NameID(tenantID) != gid {
			continue // a tombstone naming another group: sweepRemoved's to judge
		}
		self := func(m member) bool { return m.id == r.n.cfg.ID }
		if !slices.ContainsFunc(r.designated(tenantID), self) && !slices.ContainsFunc(r.wanted(tenantID), self) {
			continue
		}
		if err := r.clearTombstone(gid, tenantID); err != nil {
			r.copyErrors.Add(1)
			if now := time.Now(); now.Sub(r.copyWarned[gid]) >= copyWarnEvery {
				r.copyWarned[gid] = now
				r.n.log.Warn("replication: added back to a group it was removed from, but its old copy cannot be deleted: it stays removed", "tenant_id", tenantID, "err", err)
			}
			continue
		}
		delete(r.copyWarned, gid)
		if _, err := r.group(tenantID); err != nil {
			r.n.log.Warn("replication: reopening a group this node was added back to", "tenant_id", tenantID, "err", err)
			continue
		}
		r.n.log.Info("replication: added back to a group it was removed from: joining as a new member", "tenant_id", tenantID)
	}
}
