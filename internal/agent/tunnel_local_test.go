//go:build linux

package agent

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The tests in this file tunnel through a real agent in local mode to
// real TCP servers on the host's loopback, which is the local agent's.

// serve runs handle for every connection to a new listener on 127.0.0.1
// until the test ends, and returns its port.
func serve(t *testing.T, handle func(c *net.TCPConn)) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				handle(c.(*net.TCPConn))
			}()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port
}

// echo copies what it reads back, and half-closes at its input's end.
func echo(c *net.TCPConn) {
	io.Copy(c, c)
	c.CloseWrite()
}

func dial(t *testing.T, l *Local, port int) *Tunnel {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	tn, err := l.DialPort(ctx, port)
	if err != nil {
		t.Fatalf("dial port %d: %v", port, err)
	}
	t.Cleanup(func() { tn.Close() })
	return tn
}

// TestTunnelEcho: bytes go both ways; CloseWrite reaches the server as
// EOF, and its own half-close comes back as EOF; the tunnel then ends.
func TestTunnelEcho(t *testing.T) {
	l, _ := startLocal(t)
	tn := dial(t, l, serve(t, echo))
	if _, err := tn.Write([]byte("hello, port")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 11)
	if _, err := io.ReadFull(tn, buf); err != nil || string(buf) != "hello, port" {
		t.Fatalf("read %q, %v", buf, err)
	}
	if _, err := tn.Write([]byte("more")); err != nil {
		t.Fatal(err)
	}
	if err := tn.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(tn)
	if err != nil || string(rest) != "more" {
		t.Fatalf("after CloseWrite read %q, %v; want %q, EOF", rest, err, "more")
	}
	if _, err := tn.Write([]byte("x")); err == nil {
		t.Error("a write after CloseWrite succeeded")
	}
}

// TestTunnelPortClosed: a port nothing listens on is ErrPortClosed, with
// the agent's errno behind it.
func TestTunnelPortClosed(t *testing.T) {
	l, _ := startLocal(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	_, err = l.DialPort(t.Context(), port)
	if !errors.Is(err, ErrPortClosed) || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial a closed port: %v, want ErrPortClosed and ECONNREFUSED", err)
	}
	if _, err := l.DialPort(t.Context(), 70000); !errors.Is(err, KindInvalid) {
		t.Errorf("dial port 70000: %v, want KindInvalid", err)
	}
	// The client and the agent are whole after the refusals.
	tn := dial(t, l, serve(t, echo))
	if _, err := tn.Write([]byte("ok")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2)
	if _, err := io.ReadFull(tn, buf); err != nil {
		t.Fatal(err)
	}
}

// TestOpenPort: bytes written right after OpenPort, before the agent has
// connected, reach the server in order; a port nothing listens on ends
// the tunnel, its read and write then saying ErrPortClosed; the client
// goes on whole.
func TestOpenPort(t *testing.T) {
	l, _ := startLocal(t)
	tn, err := l.OpenPort(serve(t, echo))
	if err != nil {
		t.Fatal(err)
	}
	defer tn.Close()
	for _, s := range []string{"first ", "second ", "third"} {
		if _, err := tn.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tn.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(tn); err != nil || string(got) != "first second third" {
		t.Fatalf("echoed %q, %v", got, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	closed, err := l.OpenPort(port)
	if err != nil {
		t.Fatal(err)
	}
	defer closed.Close()
	closed.Write([]byte("GET / HTTP/1.0\r\n\r\n")) // before the answer: queued, then dropped
	if _, err := closed.Read(make([]byte, 1)); !errors.Is(err, ErrPortClosed) || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("read of a closed port's tunnel: %v, want ErrPortClosed", err)
	}
	if _, err := closed.Write([]byte("x")); !errors.Is(err, ErrPortClosed) {
		t.Errorf("write after the refusal: %v, want ErrPortClosed", err)
	}
	tn2 := dial(t, l, serve(t, echo))
	if _, err := tn2.Write([]byte("ok")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2)
	if _, err := io.ReadFull(tn2, buf); err != nil || string(buf) != "ok" {
		t.Fatalf("after the refusal: %q, %v", buf, err)
	}
}

// TestTunnelLarge: 48 MiB each way at once through one tunnel, far past
// the window, arrive whole and in order.
func TestTunnelLarge(t *testing.T) {
	l, _ := startLocal(t)
	const size = 48 << 20
	data := make([]byte, size)
	rand.Read(data)
	tn := dial(t, l, serve(t, echo))
	errc := make(chan error, 1)
	go func() {
		_, err := tn.Write(data)
		if err == nil {
			err = tn.CloseWrite()
		}
		errc <- err
	}()
	h := sha256.New()
	n, err := io.Copy(h, tn)
	if err != nil || n != size {
		t.Fatalf("read %d bytes, %v; want %d", n, err, size)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if want := sha256.Sum256(data); !bytes.Equal(h.Sum(nil), want[:]) {
		t.Fatal("the bytes that came back differ")
	}
}

// TestTunnelDownload: a server that writes much more than it reads, and
// one that reads much more than it writes.
func TestTunnelDownload(t *testing.T) {
	l, _ := startLocal(t)
	const size = 32 << 20
	down := serve(t, func(c *net.TCPConn) {
		io.CopyN(c, zeroes{}, size)
	})
	tn := dial(t, l, down)
	n, err := io.Copy(io.Discard, tn)
	if err != nil || n != size {
		t.Fatalf("download: %d bytes, %v", n, err)
	}
	up := serve(t, func(c *net.TCPConn) {
		n, _ := io.Copy(io.Discard, c)
		fmt.Fprintf(c, "%d", n)
	})
	tn = dial(t, l, up)
	if _, err := io.CopyN(tn, zeroes{}, size); err != nil {
		t.Fatal(err)
	}
	tn.CloseWrite()
	got, err := io.ReadAll(tn)
	if err != nil || string(got) != fmt.Sprint(size) {
		t.Fatalf("upload: server counted %q, %v; want %d", got, err, size)
	}
}

type zeroes struct{}

func (zeroes) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// TestTunnelMany: 64 tunnels at once, each with its own data both ways.
func TestTunnelMany(t *testing.T) {
	l, _ := startLocal(t)
	port := serve(t, echo)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tn, err := l.DialPort(t.Context(), port)
			if err != nil {
				errs <- err
				return
			}
			defer tn.Close()
			data := bytes.Repeat([]byte{byte(i)}, 512<<10+i)
			go func() {
				tn.Write(data)
				tn.CloseWrite()
			}()
			got, err := io.ReadAll(tn)
			if err != nil || !bytes.Equal(got, data) {
				errs <- fmt.Errorf("tunnel %d: %d bytes back (want %d), %v", i, len(got), len(data), err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestTunnelSlowReader: a tunnel whose reader takes nothing fills its
// window and stalls alone: other tunnels, and the control stream, go on.
// Reading it again then gets everything, in order.
func TestTunnelSlowReader(t *testing.T) {
	l, root := startLocal(t)
	const size = 8 << 20
	flood := serve(t, func(c *net.TCPConn) {
		io.CopyN(c, zeroes{}, size)
	})
	stuck := dial(t, l, flood)
	// Let the agent fill the stuck tunnel's window.
	time.Sleep(200 * time.Millisecond)
	tn := dial(t, l, serve(t, echo))
	data := make([]byte, 4<<20)
	rand.Read(data)
	go func() { tn.Write(data); tn.CloseWrite() }()
	got, err := io.ReadAll(tn)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("beside a stuck tunnel: %d bytes, %v", len(got), err)
	}
	if _, st := run(t, l, sh("echo hi > "+root+"/workspace/x")); st.Code != 0 {
		t.Fatalf("a process beside a stuck tunnel: %+v", st)
	}
	n, err := io.Copy(io.Discard, stuck)
	if err != nil || n != size {
		t.Fatalf("the stuck tunnel read %d bytes, %v; want %d", n, err, size)
	}
}

// TestTunnelClose: Close ends the server's connection, fails the
// tunnel's own calls, and a read blocked in Read returns.
func TestTunnelClose(t *testing.T) {
	l, _ := startLocal(t)
	gotEOF := make(chan error, 1)
	port := serve(t, func(c *net.TCPConn) {
		_, err := io.Copy(io.Discard, c)
		gotEOF <- err
	})
	tn := dial(t, l, port)
	readErr := make(chan error, 1)
	go func() {
		_, err := tn.Read(make([]byte, 10))
		readErr <- err
	}()
	time.Sleep(50 * time.Millisecond)
	if err := tn.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-readErr:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("blocked read after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a blocked read did not return after Close")
	}
	select {
	case <-gotEOF:
	case <-time.After(5 * time.Second):
		t.Fatal("the server's connection stayed open after Close")
	}
	if _, err := tn.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Errorf("write after Close: %v", err)
	}
}

// TestTunnelServerCloses: the server closing the connection ends reads
// with EOF and later writes with an error.
func TestTunnelServerCloses(t *testing.T) {
	l, _ := startLocal(t)
	port := serve(t, func(c *net.TCPConn) {
		io.ReadFull(c, make([]byte, 2))
		c.Write([]byte("bye"))
		c.SetLinger(0) // a reset: the agent's reads and writes fail
	})
	tn := dial(t, l, port)
	tn.Write([]byte("go"))
	got, _ := io.ReadAll(tn)
	if string(got) != "bye" {
		t.Fatalf("read %q, want bye", got)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := tn.Write([]byte("x")); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("writes to a closed connection go on succeeding")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestTunnelDeadline: a read deadline ends a read that gets nothing, and
// the tunnel works after it is lifted.
func TestTunnelDeadline(t *testing.T) {
	l, _ := startLocal(t)
	tn := dial(t, l, serve(t, echo))
	tn.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := tn.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past its deadline: %v", err)
	}
	tn.SetReadDeadline(time.Time{})
	tn.Write([]byte("z"))
	b := make([]byte, 1)
	if _, err := io.ReadFull(tn, b); err != nil || b[0] != 'z' {
		t.Fatalf("after the deadline: %q, %v", b, err)
	}
}

// TestTunnelAgentGone: the agent's end fails open tunnels with ErrLost.
func TestTunnelAgentGone(t *testing.T) {
	l, err := StartLocal(t.Context(), os.Args[0], t.TempDir(), testWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	tn := dial(t, l, serve(t, echo))
	l.Cmd.Process.Kill()
	defer l.Close() // killed: its exit status says so
	_, err = tn.Read(make([]byte, 1))
	if !errors.Is(err, ErrLost) {
		t.Fatalf("read after the agent died: %v, want ErrLost", err)
	}
}

// TestTunnelLimit: an agent holds MaxTunnels tunnels at once; a dial past
// them is refused with KindLimit, and one closed makes room again.
func TestTunnelLimit(t *testing.T) {
	l, _ := startLocal(t)
	port := serve(t, func(c *net.TCPConn) { io.Copy(io.Discard, c) })
	open := make([]*Tunnel, 0, MaxTunnels)
	defer func() {
		for _, tn := range open {
			tn.Close()
		}
	}()
	for range MaxTunnels {
		tn, err := l.DialPort(t.Context(), port)
		if err != nil {
			t.Fatalf("tunnel %d of %d: %v", len(open)+1, MaxTunnels, err)
		}
		open = append(open, tn)
	}
	if _, err := l.DialPort(t.Context(), port); !errors.Is(err, KindLimit) {
		t.Fatalf("a tunnel past %d: %v, want KindLimit", MaxTunnels, err)
	}
	open[0].Close()
	open = open[1:]
	// The agent drops the closed tunnel when it reads the close, which
	// the next dial follows on the stream.
	tn, err := l.DialPort(t.Context(), port)
	if err != nil {
		t.Fatalf("a tunnel after one closed: %v", err)
	}
	open = append(open, tn)
}
