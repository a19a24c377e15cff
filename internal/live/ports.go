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
	c, err := s.portAgent(ctx, port)
	if err != nil {
		return nil, err
	}
	t, err := c.DialPort(ctx, port)
	if err != nil {
		return nil, portError(s.id, port, err)
	}
	return t, nil
}

// OpenPort is DialPort without waiting for the agent to connect
// (agent.Client.OpenPort): a round trip less for each new connection, as
// a proxy wants; a port nothing listens on is found at the connection's
// first read or write, which then returns ErrPortClosed.
func (s *Sandbox) OpenPort(ctx context.Context, port int) (net.Conn, error) {
	c, err := s.portAgent(ctx, port)
	if err != nil {
		return nil, err
	}
	t, err := c.OpenPort(port)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", s.id, err)
	}
	return &portConn{Tunnel: t, sandbox: s.id, s: s}, nil
}

// portAgent checks port and returns the agent to reach it through.
func (s *Sandbox) portAgent(ctx context.Context, port int) (*agent.Client, error) {
	if port < 1 || port > 65535 {
		return nil, workspace.Invalid("port: a TCP port is 1-65535")
	}
	return s.agent(ctx)
}

// portError is err of a connection to port of sandbox id, as this
// package's ErrPortClosed when nothing listens there.
func portError(id string, port int, err error) error {
	if errors.Is(err, agent.ErrPortClosed) {
		return fmt.Errorf("sandbox %s: %w", id, ErrPortClosed.With("",
			"nothing listens on port %d in the sandbox (connection refused): start the server there, listening on 0.0.0.0 or 127.0.0.1, and retry", port))
	}
	if err != nil {
		return fmt.Errorf("sandbox %s: %w", id, err)
	}
	return nil
}

// portConn is a tunnel whose failed dial reads as this package's
// ErrPortClosed.
// Its bytes are calls of the sandbox (autopause.go).
type portConn struct {
	*agent.Tunnel
	sandbox string
	s       *Sandbox
}

func (c *portConn) Read(p []byte) (int, error) {
	n, err := c.Tunnel.Read(p)
	if n > 0 {
		c.s.touch()
	}
	return n, c.explain(err)
}

func (c *portConn) Write(p []byte) (int, error) {
	c.s.touch()
	n, err := c.Tunnel.Write(p)
	return n, c.explain(err)
}

func (c *portConn) explain(err error) error {
	if errors.Is(err, agent.ErrPortClosed) {
		return portError(c.sandbox, c.Port(), err)
	}
	return err
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
