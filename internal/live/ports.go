package live

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/corralhq/corral/internal/agent"
	"github.com/corralhq/corral/internal/workspace"
)

// DialPort connects to TCP port port on the sandbox's loopback, where its
// servers listen, through its agent (the sandbox has no route from the
// host): the connection's bytes travel over the agent's control stream.
// A port nothing listens on is ErrPortClosed; a paused sandbox ErrPaused.
// The connection ends with the sandbox, and with a pause.
func (s *Sandbox) DialPort(ctx context.Context, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, workspace.Invalid("port: a TCP port is 1-65535")
	}
	c, err := s.agent(ctx)
	if err != nil {
		return nil, err
	}
	conn, err := c.DialPort(ctx, port)
	if errors.Is(err, agent.ErrPortClosed) {
		return nil, fmt.Errorf("sandbox %s: %w", s.id, ErrPortClosed.With("",
			"nothing listens on port %d in the sandbox (connection refused): start the server there, listening on 0.0.0.0 or 127.0.0.1, and retry", port))
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", s.id, err)
	}
	return conn, nil
}

// PublicPorts reports whether the sandbox's ports are served without its
// access token (sandbox.CreateSandboxRequest.PublicPorts).
func (s *Sandbox) PublicPorts() bool {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	return s.spec.Request.PublicPorts
}

// Public returns this node's live sandbox id, of any tenant, if its ports
// are public: what a request without a token may reach (a sandbox id is
// unguessable, and a tenant's name is not needed to use a public URL).
func (m *Manager) Public(id string) (*Sandbox, bool) {
	for _, w := range m.table.All() {
		s, ok := m.table.State(w).Occupant.(*Sandbox)
		if !ok || s.id != id || !s.PublicPorts() {
			continue
		}
		if _, err := m.Get(s.tenant, s.id); err != nil {
			return nil, false // expired
		}
		return s, true
	}
	return nil, false
}
