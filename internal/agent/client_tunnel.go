package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Tunnels, the host's side (the agent's is tunnel.go): DialPort connects to
// a TCP port inside the sandbox and returns the connection as a net.Conn
// whose bytes travel over the control stream, multiplexed with everything
// else, each direction within TunnelWindow bytes the other side has not
// taken.

// TunnelWindow is how many bytes each direction of a tunnel sends ahead of
// the other side's acknowledgements.
const TunnelWindow = StdinWindow

// tunnelChunk caps one tunnel data frame.
const tunnelChunk = 64 << 10

// dialRequest is msgDial's payload.
type dialRequest struct {
	Port int `json:"port"`
}

// ErrPortClosed reports a dial to a port nothing listens on in the
// sandbox; the error wraps the agent's refusal (ECONNREFUSED).
var ErrPortClosed = errors.New("nothing listens on the port in the sandbox")

// tunnelAckStep is how many bytes a Tunnel's reader takes before it
// returns them to the agent's window, unless its buffer runs empty first.
const tunnelAckStep = 32 << 10

// Tunnel is a TCP connection to a port in the sandbox. It is a net.Conn
// with half-close (CloseWrite) and deadlines; Read, Write and Close may be
// called from different goroutines.
type Tunnel struct {
	c    *Client
	id   uint32
	port int

	mu sync.Mutex
	// changed is closed (and replaced) when any field below changes.
	changed chan struct{}
	// buf is what the agent sent that Read has not returned, oldest first.
	buf [][]byte
	// buffered counts buf's bytes; unacked counts bytes Read returned that
	// the agent was not told of yet.
	buffered, unacked int
	// credit is how many bytes Write may send ahead of the agent's
	// acknowledgements.
	credit int
	// eof: the port's side half-closed; rerr: the tunnel ended (nil
	// with eof set: cleanly); closed: Close was called; wclosed:
	// CloseWrite was.
	eof             bool
	rerr            error
	closed, wclosed bool
	rdl, wdl        time.Time
}

// DialPort connects to TCP port port on the sandbox's loopback. A port
// nothing listens on is ErrPortClosed.
func (c *Client) DialPort(ctx context.Context, port int) (*Tunnel, error) {
	t, k, err := c.openTunnel(port)
	if err != nil {
		return nil, err
	}
	if err := t.dialed(ctx, k); err != nil {
		return nil, err
	}
	return t, nil
}

// OpenPort is DialPort without waiting for the agent's answer: what is
// written goes right behind the dial (the agent queues it until it is
// connected), which saves a round trip on the control stream to each new
// connection (an HTTP request to a server that closes its connections
// makes one each). A dial that fails ends the tunnel: Read and Write
// return its error (ErrPortClosed when nothing listens).
func (c *Client) OpenPort(port int) (*Tunnel, error) {
	t, k, err := c.openTunnel(port)
	if err != nil {
		return nil, err
	}
	go func() {
		// The agent answers within its own dial timeout; a tunnel closed
		// meanwhile is closed on its side too.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := t.dialed(ctx, k); err != nil {
			t.end(err, false)
		}
	}()
	return t, nil
}

// openTunnel registers a tunnel and sends its dial; k is the dial's call.
func (c *Client) openTunnel(port int) (*Tunnel, *call, error) {
	b, _ := json.Marshal(dialRequest{Port: port})
	id, k := c.newCall()
	t := &Tunnel{c: c, id: id, port: port, credit: TunnelWindow}
	// Registered before the dial: the port's first bytes can follow the
	// answer at once.
	c.mu.Lock()
	if c.tunnels == nil {
		c.tunnels = map[uint32]*Tunnel{}
	}
	c.tunnels[id] = t
	c.mu.Unlock()
	if err := c.send(msgDial, id, b); err != nil {
		c.forgetCall(id)
		c.forgetTunnel(id)
		return nil, nil, err
	}
	return t, k, nil
}

// dialed waits for the agent's answer to t's dial (call k).
func (t *Tunnel) dialed(ctx context.Context, k *call) error {
	c := t.c
	if _, err := c.wait(ctx, t.id, k); err != nil {
		c.forgetTunnel(t.id)
		if ctx.Err() != nil {
			// The answer may still come: the agent drops the tunnel.
			_ = c.send(msgTunnelClose, t.id, nil)
		}
		if errors.Is(err, syscall.ECONNREFUSED) {
			err = fmt.Errorf("%w: %w", ErrPortClosed, err)
		}
		return fmt.Errorf("dial port %d: %w", t.port, err)
	}
	return nil
}

func (c *Client) forgetTunnel(id uint32) {
	c.mu.Lock()
	delete(c.tunnels, id)
	c.mu.Unlock()
}

// tunnelFrame takes a tunnel's frame from the read loop; a frame for a
// tunnel the host closed is dropped.
func (c *Client) tunnelFrame(f frame) error {
	c.mu.Lock()
	t := c.tunnels[f.id]
	if f.typ == msgTunnelEnd {
		delete(c.tunnels, f.id)
	}
	c.mu.Unlock()
	switch f.typ {
	case msgTunnelOut:
		if t != nil {
			return t.deliver(f.payload)
		}
	case msgTunnelOutEOF:
		if t != nil {
			t.end(nil, true)
		}
	case msgTunnelTook:
		var a stdinAck
		if err := json.Unmarshal(f.payload, &a); err != nil {
			return fmt.Errorf("decode tunnel ack: %w", err)
		}
		if t != nil {
			t.took(a.Bytes)
		}
	case msgTunnelEnd:
		var e errorReply
		if err := json.Unmarshal(f.payload, &e); err != nil {
			return fmt.Errorf("decode tunnel end: %w", err)
		}
		if t == nil {
			return nil
		}
		if e.Kind == "" {
			t.end(nil, true)
			// Writes end too: the agent closed the connection.
			t.end(fmt.Errorf("port %d: %w", t.port, net.ErrClosed), false)
		} else {
			t.end(fmt.Errorf("port %d: %w", t.port, &RemoteError{Kind: e.Kind, Message: e.Message}), false)
		}
	}
	return nil
}

// failTunnels ends every tunnel with err (the stream was lost, or the
// agent suspended).
func (c *Client) failTunnels(err error) {
	c.mu.Lock()
	ts := c.tunnels
	c.tunnels = nil
	c.mu.Unlock()
	for _, t := range ts {
		t.end(err, false)
	}
}

// broadcast wakes the waiters; mu is held.
func (t *Tunnel) broadcast() {
	if t.changed != nil {
		close(t.changed)
		t.changed = nil
	}
}

// wait releases mu until something changes or the deadline passes
// (os.ErrDeadlineExceeded); mu is held.
func (t *Tunnel) wait(deadline time.Time) error {
	if !deadline.IsZero() && !time.Now().Before(deadline) {
		return os.ErrDeadlineExceeded
	}
	if t.changed == nil {
		t.changed = make(chan struct{})
	}
	ch := t.changed
	var timeout <-chan time.Time
	if !deadline.IsZero() {
		tm := time.NewTimer(time.Until(deadline))
		defer tm.Stop()
		timeout = tm.C
	}
	t.mu.Unlock()
	defer t.mu.Lock()
	select {
	case <-ch:
		return nil
	case <-timeout:
		return os.ErrDeadlineExceeded
	}
}

func (t *Tunnel) deliver(b []byte) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil
	}
	if t.buffered+len(b) > TunnelWindow {
		return fmt.Errorf("tunnel %d: the agent sent past its window: %w", t.id, ErrProtocol)
	}
	t.buf = append(t.buf, append([]byte(nil), b...))
	t.buffered += len(b)
	t.broadcast()
	return nil
}

func (t *Tunnel) took(n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n > 0 {
		t.credit = min(t.credit+n, TunnelWindow)
		t.broadcast()
	}
}

// end records the port's EOF (eof) or the tunnel's end with err.
func (t *Tunnel) end(err error, eof bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if eof {
		t.eof = true
	} else if t.rerr == nil {
		t.rerr = err
	}
	t.broadcast()
}

// Read reads what the port sent. After the port's side half-closed and
// everything before was read, it returns io.EOF.
func (t *Tunnel) Read(p []byte) (int, error) {
	t.mu.Lock()
	for {
		switch {
		case t.closed:
			t.mu.Unlock()
			return 0, net.ErrClosed
		case t.buffered > 0:
			n := 0
			for n < len(p) && len(t.buf) > 0 {
				k := copy(p[n:], t.buf[0])
				n += k
				if k == len(t.buf[0]) {
					t.buf[0] = nil
					t.buf = t.buf[1:]
				} else {
					t.buf[0] = t.buf[0][k:]
				}
			}
			t.buffered -= n
			t.unacked += n
			var ack int
			if t.unacked >= tunnelAckStep || t.buffered == 0 {
				ack, t.unacked = t.unacked, 0
			}
			ended := t.rerr != nil
			t.mu.Unlock()
			if ack > 0 && !ended {
				b, _ := json.Marshal(stdinAck{Bytes: ack})
				// A lost stream ends the tunnel; its reads say so next.
				_ = t.c.send(msgTunnelAck, t.id, b)
			}
			return n, nil
		case t.eof:
			t.mu.Unlock()
			return 0, io.EOF
		case t.rerr != nil:
			err := t.rerr
			t.mu.Unlock()
			return 0, err
		}
		if err := t.wait(t.rdl); err != nil {
			t.mu.Unlock()
			return 0, err
		}
	}
}

// Write sends p to the port. It returns once every byte is sent, which is
// when the port has taken all but the last TunnelWindow bytes.
func (t *Tunnel) Write(p []byte) (int, error) {
	t.mu.Lock()
	n := 0
	for n < len(p) {
		var err error
		switch {
		case t.closed:
			err = net.ErrClosed
		case t.wclosed:
			err = fmt.Errorf("port %d: write after CloseWrite: %w", t.port, net.ErrClosed)
		case t.rerr != nil:
			err = t.rerr
		case t.credit > 0:
			k := min(len(p)-n, t.credit, tunnelChunk)
			t.credit -= k
			t.mu.Unlock()
			if err := t.c.send(msgTunnelData, t.id, p[n:n+k]); err != nil {
				t.end(err, false)
				return n, err
			}
			n += k
			t.mu.Lock()
			continue
		default:
			err = t.wait(t.wdl)
		}
		if err != nil {
			t.mu.Unlock()
			return n, err
		}
	}
	t.mu.Unlock()
	return n, nil
}

// CloseWrite half-closes the connection: the port reads EOF after what
// was written. Reads go on.
func (t *Tunnel) CloseWrite() error {
	t.mu.Lock()
	if t.closed || t.wclosed || t.rerr != nil {
		t.mu.Unlock()
		return nil
	}
	t.wclosed = true
	t.broadcast()
	t.mu.Unlock()
	return t.c.send(msgTunnelEOF, t.id, nil)
}

// Close ends the tunnel at once: the agent closes the connection.
func (t *Tunnel) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	t.buf, t.buffered = nil, 0
	ended := t.rerr != nil
	t.broadcast()
	t.mu.Unlock()
	t.c.forgetTunnel(t.id)
	if ended {
		return nil
	}
	if err := t.c.send(msgTunnelClose, t.id, nil); err != nil && !errors.Is(err, ErrSuspended) {
		return err
	}
	return nil
}

// LocalAddr is a name for the host's end.
func (t *Tunnel) LocalAddr() net.Addr { return tunnelAddr("agent") }

// Port is the sandbox's TCP port t is connected to.
func (t *Tunnel) Port() int { return t.port }

// RemoteAddr is the port, on the sandbox's loopback.
func (t *Tunnel) RemoteAddr() net.Addr {
	return tunnelAddr(net.JoinHostPort("127.0.0.1", strconv.Itoa(t.port)))
}

// SetDeadline sets the read and write deadlines.
func (t *Tunnel) SetDeadline(d time.Time) error {
	t.mu.Lock()
	t.rdl, t.wdl = d, d
	t.broadcast()
	t.mu.Unlock()
	return nil
}

// SetReadDeadline sets the read deadline.
func (t *Tunnel) SetReadDeadline(d time.Time) error {
	t.mu.Lock()
	t.rdl = d
	t.broadcast()
	t.mu.Unlock()
	return nil
}

// SetWriteDeadline sets the write deadline.
func (t *Tunnel) SetWriteDeadline(d time.Time) error {
	t.mu.Lock()
	t.wdl = d
	t.broadcast()
	t.mu.Unlock()
	return nil
}

// tunnelAddr is a tunnel's address.
type tunnelAddr string

func (a tunnelAddr) Network() string { return "corral-tunnel" }
func (a tunnelAddr) String() string  { return string(a) }

var _ net.Conn = (*Tunnel)(nil)
