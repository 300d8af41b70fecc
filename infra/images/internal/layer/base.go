package layer

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
)

// The user every Berth process runs as: not root, and numeric in the
// image config so Kubernetes can check runAsNonRoot without /etc/passwd.
const (
	UID  = 65532
	GID  = 65532
	User = "berth"
	Home = "/home/berth"
)

// CABundlePath is where Go's crypto/x509 (and most software) looks for
// the system's CA certificates on Linux.
const CABundlePath = "/etc/ssl/certs/ca-certificates.crt"

// ErrCABundle reports a CA bundle with no certificate in it.
var ErrCABundle = errors.New("layer: CA bundle holds no PEM certificate")

// Base returns the files of the minimal root filesystem: /etc/passwd and
// /etc/group with root and the berth user, nsswitch.conf (files, then
// DNS, for Go's resolver), the CA bundle at CABundlePath, a sticky /tmp
// and the berth user's home. Nothing else: no shell, no libc; the
// binaries are static.
func Base(caBundle []byte) ([]Entry, error) {
	if !hasPEMCert(caBundle) {
		return nil, ErrCABundle
	}
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\n%s:x:%d:%d:%s:%s:/sbin/nologin\n", User, UID, GID, User, Home)
	group := fmt.Sprintf("root:x:0:\n%s:x:%d:\n", User, GID)
	return []Entry{
		File("/etc/passwd", 0o644, 0, 0, []byte(passwd)),
		File("/etc/group", 0o644, 0, 0, []byte(group)),
		File("/etc/nsswitch.conf", 0o644, 0, 0, []byte("hosts: files dns\n")),
		File(CABundlePath, 0o644, 0, 0, caBundle),
		Dir("/root", 0o700, 0, 0),
		Dir("/tmp", fs.ModeSticky|0o777, 0, 0),
		Dir(Home, 0o700, UID, GID),
	}, nil
}

// hasPEMCert reports whether b holds at least one parsable certificate.
func hasPEMCert(b []byte) bool {
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return false
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		if _, err := x509.ParseCertificate(blk.Bytes); err == nil {
			return true
		}
	}
}
