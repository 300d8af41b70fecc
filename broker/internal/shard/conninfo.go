package shard

import "time"

// connInfo is what a connection keeps of its ConnInfo once connected
// (conn.info). What only the CONNECT needs (Refuse, AllowAnonymous,
// Authenticate, Deadline) is read from the ConnInfo handed to Serve while
// the handshake runs, and the enhanced-authentication pair (AuthMethod,
// Reauthenticate) lives behind a pointer, nil when neither is set: every
// held connection keeps a conn, and these 56 B helped bring it to the 640 B
// size class (connrare.go, docs/idle-connections.md).
type connInfo struct {
	RemoteAddr   string
	TenantID     string
	CredentialID string
	Authorizer   Authorizer
	Limiter      Limiter
	Traffic      *Traffic
	reauth       *reauthInfo
}

// reauthInfo is ConnInfo's AuthMethod and Reauthenticate (auth.go).
type reauthInfo struct {
	method string
	verify func(data []byte) (time.Time, error)
}

// keptInfo is what conn.info keeps of info.
func keptInfo(info *ConnInfo) connInfo {
	k := connInfo{
		RemoteAddr:   info.RemoteAddr,
		TenantID:     info.TenantID,
		CredentialID: info.CredentialID,
		Authorizer:   info.Authorizer,
		Limiter:      info.Limiter,
		Traffic:      info.Traffic,
	}
	if info.AuthMethod != "" || info.Reauthenticate != nil {
		k.reauth = &reauthInfo{method: info.AuthMethod, verify: info.Reauthenticate}
	}
	return k
}

// authMethod is ConnInfo.AuthMethod: empty for none.
func (i *connInfo) authMethod() string {
	if i.reauth == nil {
		return ""
	}
	return i.reauth.method
}

// reauthenticate is ConnInfo.Reauthenticate: nil for none.
func (i *connInfo) reauthenticate() func(data []byte) (time.Time, error) {
	if i.reauth == nil {
		return nil
	}
	return i.reauth.verify
}
