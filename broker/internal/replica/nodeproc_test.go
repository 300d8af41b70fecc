package replica

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/broker/internal/placement"
	"berth.dev/broker/internal/wal"
)

// nodeProcEnv, when set, makes this test binary a replica node process
// (TestMain): the JSON nodeSpec in it says which.
const nodeProcEnv = "BERTH_REPLICA_NODE_PROC"

// nodeSpec configures one node process of TestLeaderProcessKilled.
type nodeSpec struct {
	ID       uint64
	Dir      string
	Listen   string            // peer transport
	Peers    map[uint64]string // every other node
	Secret   string
	Groups   int // groups 1..Groups, voters 1..3
	Tick     time.Duration
	Liveness time.Duration // 0: the default (election timeout)
	Propose  time.Duration // bound of one proposal
	// DatabaseURL, when set: the node records the leaderships it wins in
	// tenant_placement (tenant ten_<group>, nodes node_<id>) through a
	// placement.Recorder, as a node's host will.
	DatabaseURL string
}

func TestMain(m *testing.M) {
	if spec := os.Getenv(nodeProcEnv); spec != "" {
		if err := runNodeProc(spec); err != nil {
			fmt.Fprintln(os.Stderr, "node process:", err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runNodeProc hosts the groups with real TCP, the HMAC transport, fsync
// always and its own data directory, prints "ready <control addr>" and
// serves a line protocol on the control address (loopback) until its stdin
// closes (the test ended) or it is killed:
//
//	p <group> <data>  propose → "ok" | "notleader" | "err <why>"
//	l <group>         → "<leader> <term>"
//	d <group>         → "<applied> <data,data,...>" (the state machine's entries)
func runNodeProc(raw string) error {
	var s nodeSpec
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		return err
	}
	log := slog.New(slog.DiscardHandler)
	if os.Getenv("REPLICA_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	h, err := New(Config{
		NodeID: s.ID, Listen: s.Listen, Secret: []byte(s.Secret), Dir: s.Dir, Fsync: wal.SyncAlways,
		TickInterval: s.Tick, ElectionTick: 10, HeartbeatTick: 1, Liveness: s.Liveness, Quiesce: true, Logger: log,
	})
	if err != nil {
		return err
	}
	for id, addr := range s.Peers {
		h.AddPeer(id, addr)
	}
	groups := map[uint64]*Group{}
	sms := map[uint64]*listSM{}
	for g := uint64(1); g <= uint64(s.Groups); g++ {
		sms[g] = &listSM{}
		if groups[g], err = h.OpenGroup(g, []uint64{1, 2, 3}, sms[g]); err != nil {
			return err
		}
	}
	if s.DatabaseURL != "" {
		if err := recordLeaderships(s, groups); err != nil {
			return err
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Printf("ready %s\n", ln.Addr())
	go func() { // the parent's end of stdin closes when the test ends, however it ends
		io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go serveControl(c, s, groups, sms)
	}
}

func serveControl(c net.Conn, s nodeSpec, groups map[uint64]*Group, sms map[uint64]*listSM) {
	defer c.Close()
	sc := bufio.NewScanner(c)
	sc.Buffer(make([]byte, 4096), 1<<20)
	w := bufio.NewWriter(c)
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), " ", 3)
		var g *Group
		var sm *listSM
		if len(f) >= 2 {
			id, _ := strconv.ParseUint(f[1], 10, 64)
			g, sm = groups[id], sms[id]
		}
		switch {
		case g == nil:
			fmt.Fprintln(w, "err bad command")
		case f[0] == "p" && len(f) == 3:
			ctx, cancel := context.WithTimeout(context.Background(), s.Propose)
			err := g.Propose(ctx, []byte(f[2]))
			cancel()
			switch {
			case err == nil:
				fmt.Fprintln(w, "ok")
			case errors.Is(err, ErrNotLeader):
				fmt.Fprintln(w, "notleader")
			default:
				fmt.Fprintln(w, "err", err)
			}
		case f[0] == "l":
			fmt.Fprintln(w, g.Leader(), g.Term())
		case f[0] == "d":
			fmt.Fprintln(w, g.Applied(), strings.Join(sm.list(), ","))
		default:
			fmt.Fprintln(w, "err bad command")
		}
		if w.Flush() != nil {
			return
		}
	}
}

// recordLeaderships watches the groups every tick and reports each term
// this node leads to a placement.Recorder (the host will call it from the
// Ready loop on a leadership change; this process stands in for that).
func recordLeaderships(s nodeSpec, groups map[uint64]*Group) error {
	pool, err := pgxpool.New(context.Background(), s.DatabaseURL)
	if err != nil {
		return err
	}
	rec := placement.NewRecorder(placement.NewStore(pool), placement.RecorderOptions{RetryMin: s.Tick})
	rec.Start(context.Background())
	go func() {
		recorded := map[uint64]uint64{}
		t := time.NewTicker(s.Tick)
		for range t.C {
			for id, g := range groups {
				if term := g.Term(); g.Leader() == s.ID && term > recorded[id] {
					recorded[id] = term
					rec.Leading(placement.Placement{
						TenantID: fmt.Sprintf("ten_%d", id), Leader: fmt.Sprintf("node_%d", s.ID),
						Replicas: []string{"node_1", "node_2", "node_3"}, Epoch: term,
					})
				}
			}
		}
	}()
	return nil
}
