package wal

import (
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// FS is the filesystem the log uses. The default is OSFS; tests inject
// faults (short writes, fsync errors) by wrapping it.
type FS interface {
	OpenFile(name string, flag int, perm fs.FileMode) (File, error)
	Remove(name string) error
	Rename(oldpath, newpath string) error
	ReadDir(name string) ([]fs.DirEntry, error)
	MkdirAll(path string, perm fs.FileMode) error
}

// File is an open file of an FS. A File that also has an OSFile() *os.File
// method (or is an *os.File) enables mmapped indexes and sendfile; other
// Files fall back to reading.
type File interface {
	io.ReaderAt
	io.Writer
	io.Closer
	Sync() error
	Truncate(size int64) error
	Stat() (fs.FileInfo, error)
}

// OSFS is the operating system's filesystem.
type OSFS struct{}

// OpenFile opens name with os.OpenFile.
func (OSFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// Remove removes name.
func (OSFS) Remove(name string) error { return os.Remove(name) }

// Rename renames oldpath to newpath.
func (OSFS) Rename(oldpath, newpath string) error { return os.Rename(oldpath, newpath) }

// ReadDir lists name.
func (OSFS) ReadDir(name string) ([]fs.DirEntry, error) { return os.ReadDir(name) }

// MkdirAll creates path and its parents.
func (OSFS) MkdirAll(path string, perm fs.FileMode) error { return os.MkdirAll(path, perm) }

// osFile returns the *os.File behind f, or nil.
func osFile(f File) *os.File {
	switch f := f.(type) {
	case *os.File:
		return f
	case interface{ OSFile() *os.File }:
		return f.OSFile()
	}
	return nil
}

// syncDir fsyncs a directory so that creates, renames and removes in it are
// durable.
func syncDir(fsys FS, dir string) error {
	d, err := fsys.OpenFile(dir, os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// SyncDir fsyncs directory dir through fsys, so that the creates, renames
// and removes made in it so far survive a power loss.
func SyncDir(fsys FS, dir string) error { return syncDir(fsys, dir) }

// RemoveFile removes path durably: the remove, then an fsync of its
// directory (without it, a power loss can bring the file back).
func RemoveFile(fsys FS, path string) error {
	if err := fsys.Remove(path); err != nil {
		return err
	}
	return syncDir(fsys, filepath.Dir(path))
}

// WriteFileAtomic writes path whole or not at all, and durably: a
// temporary file, fsynced, renamed over path, the directory fsynced. The
// directory is made if missing.
func WriteFileAtomic(fsys FS, path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := fsys.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := writeIndex(fsys, path, data); err != nil {
		return err
	}
	return syncDir(fsys, dir)
}
