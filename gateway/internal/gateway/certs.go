package gateway

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// certReloader serves the certificate in certFile/keyFile and picks up a
// new one without a restart: at most once per checkEvery, a handshake
// stats both files and reloads them when either changed. A broken new pair
// is logged and the old certificate kept.
type certReloader struct {
	certFile, keyFile string
	checkEvery        time.Duration
	log               *slog.Logger

	mu        sync.Mutex
	cert      *tls.Certificate
	stamp     string // mtimes and sizes of the loaded files
	lastCheck time.Time
}

func newCertReloader(certFile, keyFile string, checkEvery time.Duration, log *slog.Logger) (*certReloader, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile, checkEvery: checkEvery, log: log}
	stamp, err := r.fileStamp()
	if err != nil {
		return nil, err
	}
	if err := r.load(stamp); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *certReloader) fileStamp() (string, error) {
	var s string
	for _, f := range []string{r.certFile, r.keyFile} {
		fi, err := os.Stat(f)
		if err != nil {
			return "", fmt.Errorf("gateway: tls: %w", err)
		}
		s += fmt.Sprintf("%d/%d;", fi.ModTime().UnixNano(), fi.Size())
	}
	return s, nil
}

func (r *certReloader) load(stamp string) error {
	c, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return fmt.Errorf("gateway: tls: %w", err)
	}
	r.mu.Lock()
	r.cert, r.stamp = &c, stamp
	r.mu.Unlock()
	return nil
}

// getCertificate is tls.Config.GetCertificate.
func (r *certReloader) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	now := time.Now()
	r.mu.Lock()
	due := now.Sub(r.lastCheck) >= r.checkEvery
	if due {
		r.lastCheck = now
	}
	cert, old := r.cert, r.stamp
	r.mu.Unlock()
	if !due {
		return cert, nil
	}
	stamp, err := r.fileStamp()
	if err != nil || stamp == old {
		return cert, nil
	}
	if err := r.load(stamp); err != nil {
		r.log.Error("tls certificate reload failed; keeping the old one", "err", err)
		return cert, nil
	}
	r.log.Info("tls certificate reloaded", "cert", r.certFile)
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cert, nil
}
