package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"

	"berth.dev/broker/internal/node"
	"berth.dev/broker/internal/wal"
)

// nodeConfig is the node's part of Config.
func (c Config) nodeConfig(log *slog.Logger) node.Config {
	policy, _ := wal.ParsePolicy(c.Fsync) // checked by validateNode
	all, _ := parsePeers(c.Peers)         // checked by validateNode
	// -peers may name this node too (one list for every node of a
	// StatefulSet): it is skipped, its zone is this node's unless -zone.
	var peers []node.Peer
	zone := c.Zone
	for _, p := range all {
		if p.ID != c.NodeID {
			peers = append(peers, p)
		} else if zone == "" {
			zone = p.Zone
		}
	}
	return node.Config{
		DataDir:            c.DataDir,
		Fsync:              policy,
		FsyncInterval:      c.FsyncInterval,
		ID:                 c.NodeID,
		InternalListen:     c.InternalListen,
		AdminListen:        c.AdminListen,
		AdvertiseMQTT:      c.AdvertiseMQTT,
		AdvertiseAdmin:     c.AdvertiseAdmin,
		HandoffListen:      c.HandoffListen,
		PublicHost:         c.PublicHost,
		DatabaseURL:        c.DatabaseURL,
		ProxySecret:        []byte(c.ProxySecret),
		NodeToken:          c.NodeToken,
		Capacity:           c.Capacity,
		UsageInterval:      c.UsageInterval,
		JWKSURL:            c.JWKSURL,
		Issuer:             c.Issuer,
		IdleTimeout:        c.IdleTimeout,
		OTLPEndpoint:       c.OTLPEndpoint,
		TraceCap:           c.TraceCap,
		Peers:              peers,
		PeerListen:         c.PeerListen,
		PeerSecret:         []byte(c.PeerSecret),
		Zone:               zone,
		Replicas:           c.Replicas,
		MoveDisconnectRate: c.MoveDisconnectRate,
		Logger:             log,

		ProxySecretPrevious: []byte(c.ProxySecretPrevious),
		NodeTokenPrevious:   c.NodeTokenPrevious,
	}
}

// parsePeers reads -peers: id=host:port[@zone], comma-separated.
func parsePeers(s string) ([]node.Peer, error) {
	var out []node.Peer
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		id, addr, ok := strings.Cut(item, "=")
		if !ok || id == "" || addr == "" {
			return nil, fmt.Errorf("config: -peers: %q is not id=host:port[@zone]", item)
		}
		addr, zone, _ := strings.Cut(addr, "@")
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("config: -peers: %q: %w", item, err)
		}
		out = append(out, node.Peer{ID: id, Addr: addr, Zone: zone})
	}
	return out, nil
}

// validateNode checks the node-mode configuration.
func (c Config) validateNode() error {
	if c.LogFormat != "text" && c.LogFormat != "json" {
		return fmt.Errorf("config: -log-format %q: want text or json", c.LogFormat)
	}
	if _, err := wal.ParsePolicy(c.Fsync); err != nil {
		return fmt.Errorf("config: -fsync: %w", err)
	}
	if _, err := parsePeers(c.Peers); err != nil {
		return err
	}
	cfg := c.nodeConfig(nil)
	return cfg.Validate()
}

// runNode serves as a Berth node until ctx ends, then shuts down: stop
// accepting, DISCONNECT 0x8B to MQTT 5 clients, flush usage, deregister.
func runNode(ctx context.Context, cfg Config, log *slog.Logger) error {
	n, err := node.New(cfg.nodeConfig(log))
	if err != nil {
		return err
	}
	if err := n.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownGrace)
	defer cancel()
	if err := n.Shutdown(sctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
