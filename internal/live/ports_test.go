package live

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/fault"
	"github.com/corralhq/corral/internal/runtime"
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
	conn, err = s.OpenPort(t.Context(), closedPort)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Read(make([]byte, 1)); !errors.Is(err, ErrPortClosed) || fault.Of(err).Code != "port_closed" {
		t.Errorf("a closed port opened: read %v (%+v), want ErrPortClosed", err, fault.Of(err))
	}
	conn.Close()
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

// TestDialPortPause: a pause (the fake gVisor one, which keeps the agent
// running on a new stream) ends the connections open through the
// sandbox on the host's side, a dial while paused is ErrPaused, and the
// resumed agent closes the connections it held (their server reads EOF);
// new ones work.
func TestDialPortPause(t *testing.T) {
	u := newUnit(t)
	u.f.Runtimes[runtime.TierGVisor].EnablePause()
	u.create(sandbox.CreateSandboxRequest{SandboxID: "box", Tier: sandbox.IsolationGVisor, TimeoutSeconds: 60})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ended := make(chan struct{}, 4)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
				ended <- struct{}{}
			}()
		}
	}()
	port := l.Addr().(*net.TCPAddr).Port
	roundTrip := func(c net.Conn) error {
		if _, err := c.Write([]byte("ping")); err != nil {
			return err
		}
		b := make([]byte, 4)
		_, err := io.ReadFull(c, b)
		return err
	}
	s := u.handle("box")
	ctx := t.Context()
	c, err := s.DialPort(ctx, port)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := roundTrip(c); err != nil {
		t.Fatal(err)
	}
	if err := u.m.Pause(ctx, "t", "box"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("a connection read after the pause")
	}
	if _, err := s.DialPort(ctx, port); !errors.Is(err, ErrPaused) {
		t.Errorf("a dial while paused: %v, want ErrPaused", err)
	}
	if _, err := u.m.Resume(ctx, "t", "box"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the resumed agent kept the connection of before the pause")
	}
	c2, err := s.DialPort(ctx, port)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if err := roundTrip(c2); err != nil {
		t.Fatalf("after the resume: %v", err)
	}
}
