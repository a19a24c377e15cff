package live

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"testing"

	"github.com/corralhq/corral/internal/fault"
	"github.com/corralhq/corral/sandbox"
)

// TestDialPort: a connection to a port of a (fake) sandbox carries bytes
// both ways and half-closes; a port nothing listens on is ErrPortClosed,
// of its own code; a bad port is invalid; a killed sandbox's is gone. The
// fake sandbox's agent is the real one in local mode, whose loopback is
// the host's.
func TestDialPort(t *testing.T) {
	u := newUnit(t)
	if _, err := u.m.Create(t.Context(), "t", sandbox.CreateSandboxRequest{SandboxID: "box"}); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	s := u.handle("box")
	conn, err := s.DialPort(t.Context(), l.Addr().(*net.TCPAddr).Port)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	data := make([]byte, 3<<20)
	rand.Read(data)
	go func() {
		conn.Write(data)
		conn.(interface{ CloseWrite() error }).CloseWrite()
	}()
	got, err := io.ReadAll(conn)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("echo: %d bytes back of %d, %v", len(got), len(data), err)
	}

	closedPort := func() int {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port
	}()
	_, err = s.DialPort(t.Context(), closedPort)
	if !errors.Is(err, ErrPortClosed) || fault.Of(err).Code != "port_closed" {
		t.Errorf("a closed port: %v (%+v), want ErrPortClosed", err, fault.Of(err))
	}
	if _, err := s.DialPort(t.Context(), 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("port 0: %v, want ErrInvalid", err)
	}
	if err := u.m.Kill(t.Context(), "t", "box"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DialPort(t.Context(), closedPort); !errors.Is(err, ErrNotFound) {
		t.Errorf("a killed sandbox's port: %v, want ErrNotFound", err)
	}
}
