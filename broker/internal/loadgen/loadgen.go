package loadgen

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"time"
)

// Run validates cfg, performs the run and returns its report. Progress
// lines go to progress once a second when it is not nil. An error means
// the run could not be carried out (bad config, clients could not connect);
// a run that completed with loss or failures returns a Report whose OK is
// false.
func Run(ctx context.Context, cfg Config, progress io.Writer) (*Report, error) {
	if err := cfg.Validate(ctx); err != nil {
		return nil, err
	}
	d, err := newDialer(&cfg)
	if err != nil {
		return nil, err
	}
	var id [4]byte
	rand.Read(id[:])
	runID := hex.EncodeToString(id[:])
	started := time.Now()
	var r *Report
	if cfg.Mode == ModeConn {
		r, err = runConn(ctx, &cfg, d, runID, progress)
	} else {
		r, err = runTraffic(ctx, &cfg, d, runID, progress)
	}
	if err != nil {
		return nil, err
	}
	r.Mode = cfg.Mode
	r.Addr = cfg.Addr
	r.Started = started.UTC().Format(time.RFC3339)
	r.Protocol = "3.1.1"
	if cfg.V5 {
		r.Protocol = "5.0"
	}
	r.Transport = "tcp"
	switch {
	case cfg.WS && cfg.TLS:
		r.Transport = "wss"
	case cfg.WS:
		r.Transport = "ws"
	case cfg.TLS:
		r.Transport = "tls"
	}
	return r, nil
}
