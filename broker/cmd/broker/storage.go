package main

import (
	"fmt"
	"log/slog"

	"berth.dev/broker/internal/store"
	"berth.dev/broker/internal/wal"
)

// standaloneTenant is the tenant id of the standalone broker's one shard;
// its logs live in store.TenantDir(-data, standaloneTenant).
const standaloneTenant = "standalone"

// openStorage opens the write-ahead-log store under -data, or returns nil
// when no data directory is configured (state in memory only).
func openStorage(cfg Config, log *slog.Logger) (*store.WAL, error) {
	if cfg.DataDir == "" {
		return nil, nil
	}
	policy, err := wal.ParsePolicy(cfg.Fsync)
	if err != nil {
		return nil, err
	}
	st, err := store.OpenWAL(store.WALOptions{
		Dir: store.TenantDir(cfg.DataDir, standaloneTenant), Fsync: policy,
		FsyncInterval: cfg.FsyncInterval, Logger: log,
	})
	if err != nil {
		return nil, fmt.Errorf("opening -data %s: %w", cfg.DataDir, err)
	}
	log.Info("storage opened", "data", cfg.DataDir, "fsync", policy.String())
	return st, nil
}
