package store

import (
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
)

// TenantDirNames lists the tenant directories under root (a node's -data):
// the names TenantDir gives, not tenant ids (those cannot be recovered from
// a name). Postgres computes the same name from an id as
// encode(substring(sha256(convert_to(id, 'UTF8')) from 1 for 16), 'hex'),
// which lets a node ask which of its directories belong to deleted tenants.
// A missing root holds none.
func TenantDirNames(root string) ([]string, error) {
	entries, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() || len(e.Name()) != 32 {
			continue
		}
		if _, err := hex.DecodeString(e.Name()); err == nil {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// RemoveTenant erases tenantID's directory under root with everything in
// it (its message, retained and session logs). The store must be closed.
// A directory that does not exist is no error.
func RemoveTenant(root, tenantID string) error {
	return os.RemoveAll(TenantDir(root, tenantID))
}
