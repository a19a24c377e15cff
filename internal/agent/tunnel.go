//go:build linux

package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Tunnels, the agent's side (the host's is client_tunnel.go). msgDial asks
// the agent to connect to a TCP port on the sandbox's loopback (127.0.0.1,
// then ::1 when nothing listens there); its answer is msgOK once connected,
// or msgError (ECONNREFUSED: nothing listens). Then the stream's bytes go
// both ways under the dial's id, each direction credit-based like a
// process's stdin (stdin.go):
//
//   - host → agent: msgTunnelData within TunnelWindow bytes the agent has
//     not acknowledged (msgTunnelTook, sent as the connection takes them);
//     msgTunnelEOF half-closes the connection (after the data before it);
//     msgTunnelClose ends the stream at once, and the agent sends nothing
//     more for it.
//   - agent → host: msgTunnelOut within TunnelWindow bytes the host has
//     not acknowledged (msgTunnelAck from the host as its reader takes
//     them); msgTunnelOutEOF when the connection's peer half-closed;
//     msgTunnelEnd, the stream's last frame, when both directions are done
//     (an empty kind) or the connection broke (the errno's kind).
//
// The frame loop never writes to a connection: a writer goroutine per
// tunnel does (the stdin queue), and a reader goroutine per tunnel reads
// only what the host's window allows, so a slow reader on either side
// stalls its own stream only, never the control stream or other tunnels.

// dialTimeout bounds a dial to a port on the sandbox's loopback, which
// only a full accept queue delays.
const dialTimeout = 10 * time.Second

// MaxTunnels caps the tunnels an agent holds at once: each costs it two
// goroutines and a buffer in the sandbox's own memory, and a public port
// is anyone's to open connections to. A dial past it is refused with
// KindLimit.
const MaxTunnels = 1024

// Read buffers: a tunnel reads into a small one until a read fills it,
// then into a large one, so that the many tunnels that carry little (idle
// keep-alive connections, WebSockets) cost the sandbox little memory.
const (
	tunnelSmallRead = 8 << 10
	tunnelLargeRead = tunnelChunk
)

// tunnel is one connection the host dialed.
type tunnel struct {
	id uint32
	in *stdinQueue // what the host sent, for the writer

	mu sync.Mutex
	// conn is nil while the dial is under way.
	conn net.Conn
	// credit is how many bytes the host will take beyond those sent.
	credit int
	// ended: the stream is over (closed by the host, broken, or done);
	// nothing more is sent for it.
	ended bool
	// readDone, writeDone: the connection's two directions finished
	// cleanly.
	readDone, writeDone bool
	wake                chan struct{}
}

func (t *tunnel) poke() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// tunnelSet is the agent's tunnels, by id.
type tunnelSet struct {
	mu sync.Mutex
	m  map[uint32]*tunnel
}

func (s *tunnelSet) get(id uint32) *tunnel {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[id]
}

// put adds t, unless the set holds MaxTunnels.
func (s *tunnelSet) put(t *tunnel) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.m) >= MaxTunnels {
		return false
	}
	if s.m == nil {
		s.m = map[uint32]*tunnel{}
	}
	s.m[t.id] = t
	return true
}

func (s *tunnelSet) remove(id uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, id)
}

func (s *tunnelSet) all() []*tunnel {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*tunnel, 0, len(s.m))
	for _, t := range s.m {
		out = append(out, t)
	}
	return out
}

func (a *Agent) onDial(f frame) {
	var req dialRequest
	if !a.decode(f, "dial", &req) {
		return
	}
	if req.Port < 1 || req.Port > 65535 {
		a.fail(f.id, refuse(KindInvalid, "dial: port %d is not a TCP port", req.Port))
		return
	}
	// Registered before the dial, so that a close that comes meanwhile
	// finds it.
	t := &tunnel{id: f.id, in: newStdinQueue(), credit: TunnelWindow, wake: make(chan struct{}, 1)}
	if !a.tunnels.put(t) {
		a.fail(f.id, refuse(KindLimit, "dial: %d tunnels are open", MaxTunnels))
		return
	}
	go a.dial(t, req.Port)
}

// dial connects t to port and, unless the host closed t meanwhile, answers
// the dial and starts moving bytes.
func (a *Agent) dial(t *tunnel, port int) {
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if errors.Is(err, syscall.ECONNREFUSED) {
		// A server bound to localhost may be on ::1 only.
		if c6, err6 := d.DialContext(ctx, "tcp", net.JoinHostPort("::1", strconv.Itoa(port))); err6 == nil {
			conn, err = c6, nil
		}
	}
	t.mu.Lock()
	if t.ended {
		t.mu.Unlock()
		if conn != nil {
			conn.Close()
		}
		return
	}
	if err != nil {
		t.ended = true
		t.mu.Unlock()
		a.tunnels.remove(t.id)
		a.fail(t.id, fmt.Errorf("dial port %d: %w", port, err))
		return
	}
	t.conn = conn
	t.mu.Unlock()
	a.send(msgOK, t.id, nil)
	go a.tunnelWriter(t)
	go a.tunnelReader(t)
}

// tunnelReader sends what the connection's peer writes to the host, within
// the host's window.
func (a *Agent) tunnelReader(t *tunnel) {
	buf := make([]byte, tunnelSmallRead)
	for {
		t.mu.Lock()
		for t.credit <= 0 && !t.ended {
			t.mu.Unlock()
			<-t.wake
			t.mu.Lock()
		}
		if t.ended {
			t.mu.Unlock()
			return
		}
		n := min(t.credit, len(buf))
		t.mu.Unlock()
		k, err := t.conn.Read(buf[:n])
		if k > 0 {
			t.mu.Lock()
			t.credit -= k
			ended := t.ended
			t.mu.Unlock()
			if ended {
				return
			}
			a.send(msgTunnelOut, t.id, buf[:k])
		}
		if k == len(buf) && len(buf) < tunnelLargeRead {
			buf = make([]byte, tunnelLargeRead)
		}
		if errors.Is(err, io.EOF) {
			if !a.tunnelHalf(t, false) {
				a.send(msgTunnelOutEOF, t.id, nil)
			}
			return
		}
		if err != nil {
			a.tunnelBroke(t, fmt.Errorf("read from port: %w", err))
			return
		}
	}
}

// tunnelWriter writes what the host sends to the connection, in order,
// and acknowledges it; the host's EOF half-closes the connection.
func (a *Agent) tunnelWriter(t *tunnel) {
	q := t.in
	defer close(q.done)
	for {
		b, closeIt := q.next()
		if b == nil {
			if closeIt {
				if cw, ok := t.conn.(interface{ CloseWrite() error }); ok {
					if err := cw.CloseWrite(); err != nil {
						a.tunnelBroke(t, fmt.Errorf("half-close port: %w", err))
						return
					}
				}
				a.tunnelHalf(t, true)
			}
			return
		}
		if _, err := t.conn.Write(b); err != nil {
			a.tunnelBroke(t, fmt.Errorf("write to port: %w", err))
			return
		}
		if !q.written(len(b)) {
			return
		}
		ack, _ := json.Marshal(stdinAck{Bytes: len(b)})
		a.send(msgTunnelTook, t.id, ack)
	}
}

// tunnelHalf records that one direction of t finished cleanly (write: the
// host's to the port) and, when both have, ends t with msgTunnelEnd. It
// reports whether t is over, so that nothing more is sent for it.
func (a *Agent) tunnelHalf(t *tunnel, write bool) bool {
	t.mu.Lock()
	if t.ended {
		t.mu.Unlock()
		return true
	}
	if write {
		t.writeDone = true
	} else {
		t.readDone = true
	}
	done := t.readDone && t.writeDone
	if done {
		t.ended = true
	}
	t.mu.Unlock()
	if !done {
		return false
	}
	t.conn.Close()
	a.tunnels.remove(t.id)
	// The reader's EOF, if it was the last, goes with the end.
	a.sendJSON(msgTunnelEnd, t.id, errorReply{})
	return true
}

// tunnelBroke ends t for err and tells the host, unless t ended already.
func (a *Agent) tunnelBroke(t *tunnel, err error) {
	if !a.endTunnel(t) {
		return
	}
	a.sendJSON(msgTunnelEnd, t.id, errorReply{Kind: kindOf(err), Message: err.Error()})
}

// endTunnel ends t, closing its connection and stopping its goroutines,
// and reports whether this call did.
func (a *Agent) endTunnel(t *tunnel) bool {
	t.mu.Lock()
	if t.ended {
		t.mu.Unlock()
		return false
	}
	t.ended = true
	conn := t.conn
	t.mu.Unlock()
	t.poke()
	t.in.stop()
	if conn != nil {
		conn.Close()
	}
	a.tunnels.remove(t.id)
	return true
}

// onTunnel takes the host's frames for a tunnel: its data, acks, EOF and
// close. A frame for a tunnel that ended is dropped: the host learns of
// the end from msgTunnelEnd.
func (a *Agent) onTunnel(f frame) {
	t := a.tunnels.get(f.id)
	if t == nil {
		return
	}
	switch f.typ {
	case msgTunnelData:
		if err := t.in.push(f.payload); err != nil {
			a.tunnelBroke(t, refuse(KindLimit, "tunnel: more than %d bytes unacknowledged", maxStdinQueued))
		}
	case msgTunnelEOF:
		t.in.close()
	case msgTunnelAck:
		var ack stdinAck
		if err := json.Unmarshal(f.payload, &ack); err != nil || ack.Bytes < 0 {
			a.tunnelBroke(t, refuse(KindInvalid, "tunnel ack: %q", f.payload))
			return
		}
		t.mu.Lock()
		// A host cannot return more than the window.
		t.credit = min(t.credit+ack.Bytes, TunnelWindow)
		t.mu.Unlock()
		t.poke()
	case msgTunnelClose:
		a.endTunnel(t)
	}
}

// closeTunnels ends every tunnel without a word to the host: a resumed
// agent's host is a new one, which knows none of them.
func (a *Agent) closeTunnels() {
	for _, t := range a.tunnels.all() {
		a.endTunnel(t)
	}
}
