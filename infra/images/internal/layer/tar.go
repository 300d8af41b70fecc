// Package layer builds reproducible image layers: tar archives whose
// entries are sorted by path, owned by the ids they name, stamped with one
// fixed time and missing their parent directories never, so the same files
// give the same bytes and so the same digest on any machine. Base returns
// the files of the minimal root filesystem every Berth image starts from.
package layer

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Entry is one file or directory of a layer.
type Entry struct {
	Path     string      // absolute, slash-separated, clean: "/etc/passwd"
	Mode     fs.FileMode // permission bits (and sticky), with fs.ModeDir for a directory
	UID, GID int
	Data     []byte // a regular file's contents; nil for a directory
}

// Dir is a directory entry.
func Dir(p string, perm fs.FileMode, uid, gid int) Entry {
	return Entry{Path: p, Mode: fs.ModeDir | perm, UID: uid, GID: gid}
}

// File is a regular file entry.
func File(p string, perm fs.FileMode, uid, gid int, data []byte) Entry {
	return Entry{Path: p, Mode: perm, UID: uid, GID: gid, Data: data}
}

// ErrPath reports an entry path that is not absolute and clean, or is
// given twice.
var ErrPath = errors.New("layer: bad path")

// Tar writes entries as a tar archive: parent directories that are not
// given are added (0755, root), entries are sorted by path, and every
// header carries mtime and no user or group names, so equal inputs give
// equal bytes whatever their order.
func Tar(entries []Entry, mtime time.Time) ([]byte, error) {
	byPath := make(map[string]Entry, len(entries))
	for _, e := range entries {
		if e.Path == "/" || !path.IsAbs(e.Path) || path.Clean(e.Path) != e.Path {
			return nil, fmt.Errorf("%w: %q", ErrPath, e.Path)
		}
		if _, dup := byPath[e.Path]; dup {
			return nil, fmt.Errorf("%w: %q given twice", ErrPath, e.Path)
		}
		if e.Mode.IsDir() && e.Data != nil {
			return nil, fmt.Errorf("%w: directory %q has data", ErrPath, e.Path)
		}
		byPath[e.Path] = e
	}
	for _, e := range entries {
		for d := path.Dir(e.Path); d != "/"; d = path.Dir(d) {
			p, ok := byPath[d]
			if !ok {
				byPath[d] = Dir(d, 0o755, 0, 0)
			} else if !p.Mode.IsDir() {
				return nil, fmt.Errorf("%w: %q is a file and a parent of %q", ErrPath, d, e.Path)
			}
		}
	}
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	slices.Sort(paths)

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mtime = mtime.UTC().Truncate(time.Second)
	for _, p := range paths {
		e := byPath[p]
		h := &tar.Header{
			Name:    strings.TrimPrefix(p, "/"),
			Mode:    int64(e.Mode.Perm()),
			Uid:     e.UID,
			Gid:     e.GID,
			ModTime: mtime,
			Format:  tar.FormatPAX,
		}
		if e.Mode&fs.ModeSticky != 0 {
			h.Mode |= 0o1000
		}
		if e.Mode.IsDir() {
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.Data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("layer: %s: %w", p, err)
		}
		if _, err := tw.Write(e.Data); err != nil {
			return nil, fmt.Errorf("layer: %s: %w", p, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	return buf.Bytes(), nil
}

// New returns entries as an OCI layer (gzip, compressed once and kept in
// memory).
func New(entries []Entry, mtime time.Time) (v1.Layer, error) {
	b, err := Tar(entries, mtime)
	if err != nil {
		return nil, err
	}
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
}
