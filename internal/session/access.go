package session

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// A live sandbox's access token guards the calls made inside it without an
// API key (E2B's in-sandbox traffic, internal/e2b). It is kept by the node
// that holds the sandbox, in the sandbox's directory beside session.json,
// so it outlives a restart of the node and goes with the sandbox.

const (
	accessTokenFile = "access-token"
	// maxAccessToken bounds a token's length.
	maxAccessToken = 512
)

// SetAccessToken sets the access token of tenant's live sandbox id,
// replacing the one it had.
func (m *Manager) SetAccessToken(tenant, id, token string) error {
	if token == "" || len(token) > maxAccessToken {
		return invalid("an access token is 1-%d characters", maxAccessToken)
	}
	for i := 0; i < len(token); i++ {
		if token[i] <= ' ' || token[i] > '~' {
			return invalid("an access token is printable ASCII without spaces")
		}
	}
	e, err := m.liveEntry(tenant, id)
	if err != nil {
		return err
	}
	// Under m.mu, as saveLocked: a sandbox removed meanwhile (gone is set
	// before its directory goes) is not given a file again.
	m.mu.Lock()
	defer m.mu.Unlock()
	if e.gone {
		return ErrNotFound
	}
	tmp := filepath.Join(e.dir, accessTokenFile+".tmp")
	if err := os.WriteFile(tmp, []byte(token), 0o600); err != nil {
		return fmt.Errorf("save access token of %s: %w", e.key, err)
	}
	if err := os.Rename(tmp, filepath.Join(e.dir, accessTokenFile)); err != nil {
		return fmt.Errorf("save access token of %s: %w", e.key, err)
	}
	e.token = token
	return nil
}

// AccessToken returns the access token of tenant's live sandbox id, or ""
// if none was ever set. ErrNotFound: no such live sandbox.
func (m *Manager) AccessToken(tenant, id string) (string, error) {
	e, err := m.liveEntry(tenant, id)
	if err != nil {
		return "", err
	}
	m.mu.Lock()
	token := e.token
	m.mu.Unlock()
	if token != "" {
		return token, nil
	}
	// Not read since this node started (or never set).
	b, err := os.ReadFile(filepath.Join(e.dir, accessTokenFile))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read access token of %s: %w", e.key, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if e.gone {
		return "", ErrNotFound
	}
	if e.token == "" {
		e.token = string(b)
	}
	return e.token, nil
}
