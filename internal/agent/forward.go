//go:build linux

package agent

import (
	"fmt"
	"io"
	"net"
)

// forward relays TCP connections on req.Listen to the unix socket
// req.Socket, for as long as the agent lives: the program's way to the
// host's egress proxy (docs/ARCHITECTURE.md, "Egress"), bound into the
// sandbox since no sandbox has a network interface but loopback.
func (a *Agent) forward(req ForwardRequest) error {
	l, err := net.Listen("tcp", req.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", req.Listen, err)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go a.relay(c, a.hostPath(req.Socket))
		}
	}()
	return nil
}

// relay copies c to a new connection to the unix socket at sock and back,
// until both sides are done.
func (a *Agent) relay(c net.Conn, sock string) {
	defer c.Close()
	u, err := net.Dial("unix", sock)
	if err != nil {
		a.log.Warn("egress proxy unreachable", "err", err)
		return
	}
	defer u.Close()
	done := make(chan struct{})
	go func() {
		io.Copy(u, c)
		if uc, ok := u.(*net.UnixConn); ok {
			uc.CloseWrite()
		}
		close(done)
	}()
	io.Copy(c, u)
	c.Close()
	<-done
}
