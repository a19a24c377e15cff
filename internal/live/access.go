package live

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/corralhq/corral/internal/workspace"
)

// A live sandbox's access token guards the calls made inside it without an
// API key (E2B's in-sandbox traffic, internal/e2b). It is kept by the node
// that owns the sandbox, in the sandbox's directory beside session.json,
// so it outlives a restart of the node and goes with the sandbox.

const (
	accessTokenFile = "access-token"
	// maxAccessToken bounds a token's length.
	maxAccessToken = 512
)

// SetAccessToken sets the sandbox's access token, replacing the one it
// had.
func (s *Sandbox) SetAccessToken(token string) error {
	if token == "" || len(token) > maxAccessToken {
		return workspace.Invalid("an access token is 1-%d characters", maxAccessToken)
	}
	for i := 0; i < len(token); i++ {
		if token[i] <= ' ' || token[i] > '~' {
			return workspace.Invalid("an access token is printable ASCII without spaces")
		}
	}
	if _, err := s.m.Get(s.tenant, s.id); err != nil {
		return err
	}
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	// Through the table: a sandbox removed meanwhile (gone is set before
	// its directory goes) is not given a file again.
	return s.m.table.Do(s.w, func() error {
		tmp := filepath.Join(s.w.Dir(), accessTokenFile+".tmp")
		if err := os.WriteFile(tmp, []byte(token), 0o600); err != nil {
			return fmt.Errorf("save access token of %s: %w", s.w.Key(), err)
		}
		if err := os.Rename(tmp, filepath.Join(s.w.Dir(), accessTokenFile)); err != nil {
			return fmt.Errorf("save access token of %s: %w", s.w.Key(), err)
		}
		s.token = token
		return nil
	})
}

// AccessToken returns the sandbox's access token, or "" if none was ever
// set. ErrNotFound: the sandbox is gone.
func (s *Sandbox) AccessToken() (string, error) {
	if _, err := s.m.Get(s.tenant, s.id); err != nil {
		return "", err
	}
	s.m.mu.Lock()
	token := s.token
	s.m.mu.Unlock()
	if token != "" {
		return token, nil
	}
	// Not read since this node started (or never set).
	b, err := os.ReadFile(filepath.Join(s.w.Dir(), accessTokenFile))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read access token of %s: %w", s.w.Key(), err)
	}
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	if s.m.table.State(s.w).Gone {
		return "", ErrNotFound
	}
	if s.token == "" {
		s.token = string(b)
	}
	return s.token, nil
}
