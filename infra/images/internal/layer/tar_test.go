package layer

import (
	"archive/tar"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"io/fs"
	"math/big"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

type hdr struct {
	Name       string
	Type       byte
	Mode       int64
	UID, GID   int
	Uname      string
	Size       int64
	ModTimeSec int64
}

func readTar(t *testing.T, b []byte) []hdr {
	t.Helper()
	var out []hdr
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, hdr{h.Name, h.Typeflag, h.Mode, h.Uid, h.Gid, h.Uname, h.Size, h.ModTime.Unix()})
	}
}

func TestTarSortsAddsParentsAndStamps(t *testing.T) {
	mtime := time.Unix(1700000000, 0)
	a := []Entry{
		File("/usr/local/bin/api", 0o755, 0, 0, []byte("binary")),
		Dir("/tmp", fs.ModeSticky|0o777, 0, 0),
		File("/etc/passwd", 0o644, 0, 0, []byte("root:x:0:0::/:\n")),
		Dir("/home/berth", 0o700, UID, GID),
	}
	b := slices.Clone(a)
	slices.Reverse(b)
	ta, err := Tar(a, mtime)
	if err != nil {
		t.Fatal(err)
	}
	tb, err := Tar(b, mtime)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ta, tb) {
		t.Fatal("the same entries in another order gave other bytes")
	}
	want := []hdr{
		{"etc/", tar.TypeDir, 0o755, 0, 0, "", 0, 1700000000},
		{"etc/passwd", tar.TypeReg, 0o644, 0, 0, "", 15, 1700000000},
		{"home/", tar.TypeDir, 0o755, 0, 0, "", 0, 1700000000},
		{"home/berth/", tar.TypeDir, 0o700, UID, GID, "", 0, 1700000000},
		{"tmp/", tar.TypeDir, 0o1777, 0, 0, "", 0, 1700000000},
		{"usr/", tar.TypeDir, 0o755, 0, 0, "", 0, 1700000000},
		{"usr/local/", tar.TypeDir, 0o755, 0, 0, "", 0, 1700000000},
		{"usr/local/bin/", tar.TypeDir, 0o755, 0, 0, "", 0, 1700000000},
		{"usr/local/bin/api", tar.TypeReg, 0o755, 0, 0, "", 6, 1700000000},
	}
	if d := cmp.Diff(want, readTar(t, ta)); d != "" {
		t.Fatalf("entries (-want +got):\n%s", d)
	}
	other, err := Tar(a, mtime.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(ta, other) {
		t.Fatal("another mtime gave the same bytes")
	}
}

func TestTarRefusesBadPaths(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries []Entry
	}{
		{"relative", []Entry{File("etc/passwd", 0o644, 0, 0, nil)}},
		{"unclean", []Entry{File("/etc/../passwd", 0o644, 0, 0, nil)}},
		{"root", []Entry{Dir("/", 0o755, 0, 0)}},
		{"twice", []Entry{File("/a", 0o644, 0, 0, nil), File("/a", 0o600, 0, 0, nil)}},
		{"file as parent", []Entry{File("/a", 0o644, 0, 0, nil), File("/a/b", 0o644, 0, 0, nil)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Tar(tc.entries, time.Unix(0, 0)); !errors.Is(err, ErrPath) {
				t.Fatalf("err = %v, want ErrPath", err)
			}
		})
	}
}

func TestBase(t *testing.T) {
	ca := selfSignedPEM(t)
	if _, err := Base([]byte("not a certificate")); !errors.Is(err, ErrCABundle) {
		t.Fatalf("Base(junk) err = %v, want ErrCABundle", err)
	}
	ents, err := Base(ca)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]Entry{}
	for _, e := range ents {
		files[e.Path] = e
	}
	if !bytes.Equal(files[CABundlePath].Data, ca) {
		t.Fatalf("%s is not the given bundle", CABundlePath)
	}
	if got, want := string(files["/etc/passwd"].Data), "berth:x:65532:65532:berth:/home/berth:/sbin/nologin\n"; !bytes.Contains([]byte(got), []byte(want)) {
		t.Fatalf("/etc/passwd = %q, want a line %q", got, want)
	}
	if h := files[Home]; h.UID != UID || h.GID != GID || !h.Mode.IsDir() {
		t.Fatalf("%s = %+v, want a directory owned by %d:%d", Home, h, UID, GID)
	}
	if tmp := files["/tmp"]; tmp.Mode&fs.ModeSticky == 0 || tmp.Mode.Perm() != 0o777 {
		t.Fatalf("/tmp mode = %v, want sticky and world-writable", tmp.Mode)
	}
}

// selfSignedPEM returns one freshly made CA certificate, PEM-encoded.
func selfSignedPEM(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "berth test CA"},
		NotBefore: time.Unix(0, 0), NotAfter: time.Unix(1<<32, 0), IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
