package store

import "sync"

// Memory is a Store that keeps everything in memory: state survives a
// reconnect but not a restart of the process.
type Memory struct {
	mu       sync.RWMutex
	closed   bool
	retained map[string]*Message
	sessions map[string]*Session
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty in-memory store.
func NewMemory() *Memory {
	return &Memory{retained: make(map[string]*Message), sessions: make(map[string]*Session)}
}

// SetRetained implements Store.
func (m *Memory) SetRetained(msg *Message) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	m.retained[msg.Topic] = msg
	return nil
}

// DeleteRetained implements Store.
func (m *Memory) DeleteRetained(topic string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	delete(m.retained, topic)
	return nil
}

// Retained implements Store.
func (m *Memory) Retained(fn func(*Message) bool) error {
	m.mu.RLock()
	if m.closed {
		m.mu.RUnlock()
		return ErrClosed
	}
	list := make([]*Message, 0, len(m.retained))
	for _, msg := range m.retained {
		list = append(list, msg)
	}
	m.mu.RUnlock()
	for _, msg := range list {
		if !fn(msg) {
			break
		}
	}
	return nil
}

// SaveSession implements Store.
func (m *Memory) SaveSession(s *Session) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	m.sessions[s.ClientID] = s
	return nil
}

// DeleteSession implements Store.
func (m *Memory) DeleteSession(clientID string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	delete(m.sessions, clientID)
	return nil
}

// Sessions implements Store.
func (m *Memory) Sessions(fn func(*Session) bool) error {
	m.mu.RLock()
	if m.closed {
		m.mu.RUnlock()
		return ErrClosed
	}
	list := make([]*Session, 0, len(m.sessions))
	for _, s := range m.sessions {
		list = append(list, s)
	}
	m.mu.RUnlock()
	for _, s := range list {
		if !fn(s) {
			break
		}
	}
	return nil
}

// Close implements Store.
func (m *Memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	return nil
}
