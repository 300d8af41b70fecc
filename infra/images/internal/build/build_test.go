package build

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"debug/elf"
	"encoding/pem"
	"log/slog"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"berth.dev/images/internal/layer"
)

// testOptions builds for this machine's architecture (its binaries are
// run) into a fresh directory, with a CA bundle made here.
func testOptions(t *testing.T) Options {
	t.Helper()
	root, err := FindRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	return Options{
		Root: root, Out: t.TempDir(),
		Version: "1.2.3-smoke", Revision: "0123456789abcdef0123456789abcdef01234567",
		Source: "https://example.invalid/berth", Created: time.Unix(1700000000, 0).UTC(),
		Arch: runtime.GOARCH, CABundle: selfSignedPEM(t),
		Log: slog.New(slog.NewTextHandler(t.Output(), nil)),
	}
}

// TestImages builds every image once with the images command (built
// without -race, as `make images` runs it), checks each one's config and
// runs its binary from its unpacked root filesystem, then builds them all
// again (binaries too) and expects the same bytes in every index.json and
// the same blobs.
func TestImages(t *testing.T) {
	o := testOptions(t)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, o.CABundle, 0o644); err != nil {
		t.Fatal(err)
	}
	tool := filepath.Join(t.TempDir(), "images")
	gobuild := exec.CommandContext(t.Context(), "go", "build", "-o", tool, "./cmd/images")
	gobuild.Dir = filepath.Join(o.Root, "infra", "images")
	if out, err := gobuild.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/images: %v\n%s", err, out)
	}
	build := func(t *testing.T, out string) {
		t.Helper()
		start := time.Now()
		cmd := exec.CommandContext(t.Context(), tool, "-out", out, "-tag", o.Version, "-revision", o.Revision,
			"-source", o.Source, "-arch", o.Arch, "-ca-bundle", caFile)
		// -created from its environment fallback, and the repository
		// found from the working directory.
		cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH="+strconv.FormatInt(o.Created.Unix(), 10))
		cmd.Dir = gobuild.Dir
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		stdout, err := cmd.Output()
		if err != nil {
			t.Fatalf("images: %v\n%s", err, stderr.Bytes())
		}
		t.Logf("built in %v:\n%s", time.Since(start).Round(time.Millisecond), stdout)
	}
	build(t, o.Out)
	for _, im := range Images() {
		t.Run(im.Name, func(t *testing.T) { smoke(t, o, im, filepath.Join(o.Out, im.Name)) })
	}

	t.Run("reproducible", func(t *testing.T) {
		again := t.TempDir()
		build(t, again)
		for _, im := range Images() {
			a, b := filepath.Join(o.Out, im.Name), filepath.Join(again, im.Name)
			ia, err := os.ReadFile(filepath.Join(a, "index.json"))
			if err != nil {
				t.Fatal(err)
			}
			ib, err := os.ReadFile(filepath.Join(b, "index.json"))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(ia, ib) {
				t.Errorf("%s: index.json differs:\n%s\n%s", im.Name, ia, ib)
			}
			if d := cmp.Diff(blobs(t, a), blobs(t, b)); d != "" {
				t.Errorf("%s: blobs differ (-first +second):\n%s", im.Name, d)
			}
		}
	})
}

// blobs lists an OCI layout's blob files (named by their digests).
func blobs(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "blobs", "sha256", "*"))
	if err != nil || len(m) == 0 {
		t.Fatalf("%s: no blobs (%v)", dir, err)
	}
	for i := range m {
		m[i] = filepath.Base(m[i])
	}
	return m
}

// smoke checks one built image: its layout entry, config (user,
// entrypoint, labels, platform) and root filesystem, and runs
// `<binary> -version` inside it.
func smoke(t *testing.T, o Options, im Image, dir string) {
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	ii, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	idx, err := ii.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(idx.Manifests) != 1 {
		t.Fatalf("index.json lists %d manifests, want 1", len(idx.Manifests))
	}
	d := idx.Manifests[0]
	if d.Annotations[RefName] != o.Version || d.MediaType != types.OCIManifestSchema1 ||
		d.Platform == nil || d.Platform.OS != "linux" || d.Platform.Architecture != o.Arch {
		t.Fatalf("index.json entry = %+v, want %s %q, an OCI manifest for linux/%s", d, RefName, o.Version, o.Arch)
	}
	img, err := p.Image(d.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if h, err := img.Digest(); err != nil || h != d.Digest {
		t.Fatalf("image digest %s (%v), index.json says %s", h, err, d.Digest)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != o.Arch || !cf.Created.Time.Equal(o.Created) {
		t.Errorf("config os/arch/created = %s/%s/%v, want linux/%s/%v", cf.OS, cf.Architecture, cf.Created.Time, o.Arch, o.Created)
	}
	entry := BinDir + "/" + filepath.Base(im.Package)
	if d := cmp.Diff([]string{entry}, cf.Config.Entrypoint); d != "" {
		t.Errorf("entrypoint (-want +got):\n%s", d)
	}
	uid, gid := parseUser(t, cf.Config.User)
	if uid == 0 || gid == 0 {
		t.Errorf("user %q: runs as root", cf.Config.User)
	}
	for k, v := range map[string]string{LabelVersion: o.Version, LabelRevision: o.Revision, LabelSource: o.Source, LabelTitle: im.Name} {
		if got := cf.Config.Labels[k]; got != v {
			t.Errorf("label %s = %q, want %q", k, got, v)
		}
	}

	root := unpack(t, img)
	passwd, err := os.ReadFile(filepath.Join(root, "etc/passwd"))
	if err != nil {
		t.Fatal(err)
	}
	if line := fmtPasswd(uid, gid); !strings.Contains(string(passwd), line) {
		t.Errorf("/etc/passwd = %q, want the line %q", passwd, line)
	}
	ca, err := os.ReadFile(filepath.Join(root, layer.CABundlePath))
	if err != nil || !bytes.Equal(ca, o.CABundle) || !x509.NewCertPool().AppendCertsFromPEM(ca) {
		t.Errorf("%s: %v; want the given bundle, parsable", layer.CABundlePath, err)
	}
	binPath := filepath.Join(root, entry)
	assertStatic(t, binPath, o.Arch)

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, entry, "-version")
	cmd.Env = cf.Config.Env
	if os.Geteuid() == 0 {
		// As a runtime would: chrooted into the image, as its user, in
		// its working directory.
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root, Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
		cmd.Dir = cf.Config.WorkingDir
	} else {
		cmd.Path, cmd.Dir = binPath, root
		t.Logf("not root: %s runs from the unpacked tree without chroot or a change of user", entry)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s -version: %v\n%s", entry, err, stderr.Bytes())
	}
	want := filepath.Base(im.Package) + " " + o.Version + " (revision " + o.Revision + ")\n"
	if string(out) != want {
		t.Errorf("%s -version printed %q, want %q", entry, out, want)
	}
}

// TestComposeStampsInputs: the same inputs give the same image digest,
// and each input that is stamped changes it.
func TestComposeStampsInputs(t *testing.T) {
	o := testOptions(t)
	im := Images()[0]
	digest := func(o Options, bin string) v1.Hash {
		t.Helper()
		ents, err := layer.Base(o.CABundle)
		if err != nil {
			t.Fatal(err)
		}
		base, err := layer.New(ents, o.Created)
		if err != nil {
			t.Fatal(err)
		}
		img, err := Compose(o, im, base, []byte(bin))
		if err != nil {
			t.Fatal(err)
		}
		h, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	ref := digest(o, "binary")
	if again := digest(o, "binary"); again != ref {
		t.Fatalf("same inputs: %s, then %s", ref, again)
	}
	for name, change := range map[string]func(*Options, *string){
		"binary":   func(_ *Options, b *string) { *b = "binary2" },
		"created":  func(o *Options, _ *string) { o.Created = o.Created.Add(time.Second) },
		"version":  func(o *Options, _ *string) { o.Version = "1.2.4" },
		"revision": func(o *Options, _ *string) { o.Revision = "fedcba" },
		"source":   func(o *Options, _ *string) { o.Source = "https://example.invalid/fork" },
		"arch":     func(o *Options, _ *string) { o.Arch = "riscv64" },
		"ca":       func(o *Options, _ *string) { o.CABundle = selfSignedPEM(t) },
	} {
		o2, bin := o, "binary"
		change(&o2, &bin)
		if digest(o2, bin) == ref {
			t.Errorf("changing the %s left the digest %s", name, ref)
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	good := testOptions(t)
	if imgs, err := good.validate(); err != nil || len(imgs) != len(Images()) {
		t.Fatalf("valid options: %d images, %v", len(imgs), err)
	}
	some := good
	some.Names = []string{"berth-migrate", "berth-api"}
	if imgs, err := some.validate(); err != nil || len(imgs) != 2 || imgs[0].Name != "berth-api" {
		t.Fatalf("two names: %+v, %v", imgs, err)
	}
	for name, change := range map[string]func(*Options){
		"tag with a slash":    func(o *Options) { o.Version = "1.0/x" },
		"empty tag":           func(o *Options) { o.Version = "" },
		"revision with space": func(o *Options) { o.Revision = "a b" },
		"no source":           func(o *Options) { o.Source = "" },
		"unknown image":       func(o *Options) { o.Names = []string{"berth-nope"} },
	} {
		o := good
		change(&o)
		if _, err := o.validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func parseUser(t *testing.T, s string) (uid, gid int) {
	t.Helper()
	u, g, ok := strings.Cut(s, ":")
	var err1, err2 error
	uid, err1 = strconv.Atoi(u)
	gid, err2 = strconv.Atoi(g)
	if !ok || err1 != nil || err2 != nil {
		t.Fatalf("user %q is not numeric uid:gid (Kubernetes' runAsNonRoot needs numbers)", s)
	}
	return uid, gid
}

func fmtPasswd(uid, gid int) string {
	return layer.User + ":x:" + strconv.Itoa(uid) + ":" + strconv.Itoa(gid) + ":"
}

// assertStatic fails unless path is an ELF executable for arch with no
// interpreter and no shared libraries: it runs on an image without libc.
func assertStatic(t *testing.T, path, arch string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	machine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch]
	if f.Machine != machine {
		t.Errorf("%s: machine %v, want %v", path, f.Machine, machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s: has an ELF interpreter: dynamically linked", path)
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("%s: needs shared libraries %v", path, libs)
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
