package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"syscall"
	"time"

	"github.com/corralhq/corral/internal/fault"
)

// ErrLost reports that the control stream to the agent broke: the sandbox
// died or the agent misbehaved. Whoever holds the sandbox makes it again
// at the next call.
var ErrLost = &fault.Error{Kind: fault.Unavailable, Code: "sandbox_restarting", RetryAfter: time.Second,
	Message: "the sandbox ended during the call; it is made again at the next call (what ran in it is lost); retry"}

// ErrTooLarge: a request too large for one message to the agent
// (MaxPayload once encoded: an argv, environment and working directory
// together). Nothing was sent: the sandbox and its connection are whole.
var ErrTooLarge = fault.New(fault.InvalidArgument,
	"the request is too large for the sandbox's agent (1 MiB a message once encoded: arguments, environment and paths together); send less")

// Output receives a process's output as it arrives. Calls come from one
// goroutine, in order; they should not block for long, since that stalls the
// process writing.
type Output interface {
	Stdout(p []byte)
	Stderr(p []byte)
	Status(p []byte)
}

// Client is the host side of the control stream. It is safe for concurrent
// use.
type Client struct {
	r io.Reader
	c io.Closer

	wmu sync.Mutex
	w   io.Writer
	// suspended: the agent sends nothing and may be sent nothing but
	// msgResume (resume_client.go).
	suspended bool

	hello chan Hello
	done  chan struct{} // closed when the read loop ends

	mu      sync.Mutex
	err     error // why the read loop ended
	nextID  uint32
	waiters map[uint32]*call
	procs   map[uint32]*Process
	watches map[uint32]*clientWatch
	// tunnels are the connections to the sandbox's ports
	// (client_tunnel.go), by id.
	tunnels map[uint32]*Tunnel
	// held are a resumed agent's processes not attached yet, by id.
	held map[uint32]*Process
}

type call struct {
	done    chan struct{}
	err     error
	payload []byte
	// data receives msgFileData frames (ReadFile); werr is its first
	// write error.
	data io.Writer
	werr error
}

// NewClient starts reading from r. closer is closed by Close.
func NewClient(r io.Reader, w io.Writer, closer io.Closer) *Client {
	c := &Client{
		r: r, w: w, c: closer,
		hello:   make(chan Hello, 1),
		done:    make(chan struct{}),
		waiters: map[uint32]*call{},
		procs:   map[uint32]*Process{},
		watches: map[uint32]*clientWatch{},
	}
	go c.readLoop()
	return c
}

// Ready waits for the agent's hello.
func (c *Client) Ready(ctx context.Context) (Hello, error) {
	select {
	case h := <-c.hello:
		c.hello <- h
		return h, nil
	case <-c.done:
		return Hello{}, c.lostErr()
	case <-ctx.Done():
		return Hello{}, ctx.Err()
	}
}

// Done is closed when the control stream ends.
func (c *Client) Done() <-chan struct{} { return c.done }

// Close closes the control stream; the agent then kills every process and
// exits, which ends the sandbox.
func (c *Client) Close() error {
	if c.c == nil {
		return nil
	}
	return c.c.Close()
}

func (c *Client) lostErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil || errors.Is(c.err, io.EOF) {
		return ErrLost
	}
	return fmt.Errorf("%w: %w", ErrLost, c.err)
}

func (c *Client) send(typ byte, id uint32, payload []byte) error {
	// Refused before the write: writeFrame's refusal would be taken for
	// a broken stream (ErrLost), and the sandbox made again for nothing.
	if len(payload) > MaxPayload {
		return fmt.Errorf("a message of %d bytes: %w", len(payload), ErrTooLarge)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.suspended {
		return ErrSuspended
	}
	if err := writeFrame(c.w, typ, id, payload); err != nil {
		return fmt.Errorf("%w: %w", ErrLost, err)
	}
	return nil
}

func (c *Client) newCall() (uint32, *call) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nextID++
	k := &call{done: make(chan struct{})}
	c.waiters[c.nextID] = k
	return c.nextID, k
}

func (c *Client) wait(ctx context.Context, id uint32, k *call) ([]byte, error) {
	select {
	case <-k.done:
		return k.payload, k.err
	case <-c.done:
		return nil, c.lostErr()
	case <-ctx.Done():
		c.mu.Lock()
		delete(c.waiters, id)
		c.mu.Unlock()
		return nil, ctx.Err()
	}
}

func (c *Client) readLoop() {
	var err error
	defer func() {
		c.mu.Lock()
		c.err = err
		procs, watches := c.procs, c.watches
		c.procs, c.watches = map[uint32]*Process{}, map[uint32]*clientWatch{}
		c.mu.Unlock()
		close(c.done)
		for _, p := range procs {
			p.end(ExitStatus{}, c.lostErr())
		}
		for _, w := range watches {
			w.finish(c.lostErr())
		}
		c.failTunnels(c.lostErr())
	}()
	// Buffered: a frame's header and payload (or several small frames) in
	// one read instead of one each.
	r := bufio.NewReader(c.r)
	var buf []byte
	gotHello := false
	for {
		var f frame
		f, buf, err = readFrame(r, buf)
		if err != nil {
			return
		}
		if !gotHello {
			if f.typ != msgHello {
				err = fmt.Errorf("first frame has type %d: %w", f.typ, ErrProtocol)
				return
			}
			var h Hello
			if err = json.Unmarshal(f.payload, &h); err != nil {
				err = fmt.Errorf("decode hello: %w", err)
				return
			}
			if h.Version != Version {
				err = fmt.Errorf("agent speaks version %d, want %d: %w", h.Version, Version, ErrProtocol)
				return
			}
			gotHello = true
			if h.Resume != nil {
				c.resumed(h.Resume)
			}
			c.hello <- h
			continue
		}
		switch f.typ {
		case msgStdout, msgStderr, msgStatus:
			c.mu.Lock()
			p := c.procs[f.id]
			c.mu.Unlock()
			if p != nil {
				p.deliver(f.typ, f.payload)
			}
		case msgExit:
			var st ExitStatus
			if err = json.Unmarshal(f.payload, &st); err != nil {
				err = fmt.Errorf("decode exit: %w", err)
				return
			}
			c.mu.Lock()
			p := c.procs[f.id]
			delete(c.procs, f.id)
			c.mu.Unlock()
			if p != nil {
				p.end(st, nil)
			}
		case msgFileData:
			c.mu.Lock()
			k := c.waiters[f.id]
			c.mu.Unlock()
			if k != nil && k.data != nil {
				if _, werr := k.data.Write(f.payload); werr != nil && k.werr == nil {
					k.werr = werr
				}
			}
		case msgStdinAck, msgStdinEnd:
			if err = c.stdinFrame(f); err != nil {
				return
			}
		case msgWatchEvents, msgWatchEnd:
			if err = c.watchFrame(f); err != nil {
				return
			}
		case msgTunnelOut, msgTunnelOutEOF, msgTunnelTook, msgTunnelEnd:
			if err = c.tunnelFrame(f); err != nil {
				return
			}
		case msgStarted, msgOK, msgError, msgHello: // a later hello answers Resume
			c.mu.Lock()
			k := c.waiters[f.id]
			delete(c.waiters, f.id)
			c.mu.Unlock()
			if k == nil {
				continue
			}
			if f.typ == msgError {
				var e errorReply
				_ = json.Unmarshal(f.payload, &e)
				if e.Kind == "" {
					e.Kind = KindInternal
				}
				k.err = &RemoteError{Kind: e.Kind, Message: e.Message}
			} else {
				k.payload = append([]byte(nil), f.payload...)
			}
			close(k.done)
		default:
			err = fmt.Errorf("frame type %d: %w", f.typ, ErrProtocol)
			return
		}
	}
}

// Process is a process started in the sandbox.
type Process struct {
	c   *Client
	id  uint32
	PID int // inside the sandbox
	// Ready is what a zygote reported when it became ready.
	Ready json.RawMessage
	out   Output

	done   chan struct{}
	status ExitStatus
	err    error
	// in is the process's stdin (client_stdin.go).
	in stdinFlow
}

func (p *Process) deliver(typ byte, b []byte) {
	if p.out == nil {
		return
	}
	switch typ {
	case msgStdout:
		p.out.Stdout(b)
	case msgStderr:
		p.out.Stderr(b)
	case msgStatus:
		p.out.Status(b)
	}
}

func (p *Process) end(st ExitStatus, err error) {
	p.status, p.err = st, err
	p.endStdin(err)
	close(p.done)
}

// Start starts a process; out receives its output until Wait returns.
func (c *Client) Start(ctx context.Context, req StartRequest, out Output) (_ *Process, err error) {
	ctx, span := traceCall(ctx, msgStart)
	defer func() { endCall(span, err) }()
	b, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encode start: %w", err)
	}
	id, k := c.newCall()
	p := &Process{c: c, id: id, out: out, done: make(chan struct{})}
	p.in.noStdin = !req.Stdin && req.PTY == nil
	// Register before sending: output can arrive before the started reply.
	c.mu.Lock()
	c.procs[id] = p
	c.mu.Unlock()
	if err := c.send(msgStart, id, b); err != nil {
		c.forget(id)
		return nil, err
	}
	payload, err := c.wait(ctx, id, k)
	if err != nil {
		c.forget(id)
		return nil, fmt.Errorf("start %v: %w", req.Argv, err)
	}
	var r startedReply
	if err := json.Unmarshal(payload, &r); err != nil {
		c.forget(id)
		return nil, fmt.Errorf("decode started: %w: %w", ErrProtocol, err)
	}
	p.PID, p.Ready = r.PID, r.Ready
	return p, nil
}

func (c *Client) forget(id uint32) {
	c.mu.Lock()
	delete(c.procs, id)
	c.mu.Unlock()
}

// Done is closed when the process has ended and all its output was delivered.
func (p *Process) Done() <-chan struct{} { return p.done }

// Wait waits for the process to end and its output to drain.
func (p *Process) Wait(ctx context.Context) (ExitStatus, error) {
	select {
	case <-p.done:
		return p.status, p.err
	case <-ctx.Done():
		return ExitStatus{}, ctx.Err()
	}
}

// Signal sends sig to the process's group.
func (p *Process) Signal(ctx context.Context, sig syscall.Signal) error {
	b, _ := json.Marshal(signalRequest{Signal: int(sig)})
	return p.c.procCall(ctx, msgSignal, p.id, b)
}

// KillAll sends sig to every process in the sandbox except the agent and
// persistent processes.
func (c *Client) KillAll(ctx context.Context, sig syscall.Signal) error {
	id, _ := c.newCall()
	c.forgetCall(id)
	b, _ := json.Marshal(signalRequest{Signal: int(sig), All: true})
	return c.procCall(ctx, msgSignal, id, b)
}

func (c *Client) forgetCall(id uint32) {
	c.mu.Lock()
	delete(c.waiters, id)
	c.mu.Unlock()
}

// procCall sends a request about a process (a signal, a resize): it
// reuses the process's id so the agent finds it, and the reply is matched
// by a waiter under the same id.
func (c *Client) procCall(ctx context.Context, typ byte, procID uint32, b []byte) (err error) {
	ctx, span := traceCall(ctx, typ)
	defer func() { endCall(span, err) }()
	k := &call{done: make(chan struct{})}
	c.mu.Lock()
	if _, busy := c.waiters[procID]; busy {
		c.mu.Unlock()
		return c.send(typ, procID, b) // fire and forget
	}
	c.waiters[procID] = k
	c.mu.Unlock()
	if err := c.send(typ, procID, b); err != nil {
		c.forgetCall(procID)
		return err
	}
	_, err = c.wait(ctx, procID, k)
	return err
}

// WriteFile creates path (absolute, under /workspace or /tmp; in a system
// sandbox anywhere but /proc, /sys, /dev and /.corral) in the sandbox with
// mode and the contents of r, streamed in frames. The agent writes as the
// sandbox's user (AsUser), so a link planted by a program cannot redirect a
// write to the host.
func (c *Client) WriteFile(ctx context.Context, path string, mode uint32, r io.Reader, opts ...FileOption) (err error) {
	ctx, span := traceCall(ctx, msgFileEnd)
	defer func() { endCall(span, err) }()
	placed, err := c.SendFile(ctx, path, mode, r, opts...)
	if err != nil {
		return err
	}
	return placed(ctx)
}

// SendFile is WriteFile without waiting for the agent's answer, which placed
// waits for. The agent handles frames in order, so a process started after
// SendFile returns sees the file (if placed reports no error): a caller can
// save a round trip by starting the process first and calling placed after.
func (c *Client) SendFile(ctx context.Context, path string, mode uint32, r io.Reader, opts ...FileOption) (placed func(context.Context) error, err error) {
	h, _ := json.Marshal(fileHeader{Path: path, Mode: mode, User: fileUser(opts)})
	id, k := c.newCall()
	if err := c.send(msgFileBegin, id, h); err != nil {
		c.forgetCall(id)
		return nil, err
	}
	buf := make([]byte, 256<<10)
	for {
		n, rerr := r.Read(buf)
		if n > 0 {
			if err := c.send(msgFileData, id, buf[:n]); err != nil {
				c.forgetCall(id)
				return nil, err
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			c.forgetCall(id)
			// The agent drops what it has of the file; the error is ours.
			_ = c.send(msgFileEnd, id, []byte(discardUpload))
			return nil, fmt.Errorf("read contents of %s: %w", path, rerr)
		}
		select {
		case <-k.done: // the agent failed early
			return nil, k.err
		case <-ctx.Done():
			c.forgetCall(id)
			_ = c.send(msgFileEnd, id, []byte(discardUpload))
			return nil, ctx.Err()
		default:
		}
	}
	if err := c.send(msgFileEnd, id, nil); err != nil {
		c.forgetCall(id)
		return nil, err
	}
	return func(ctx context.Context) error {
		_, err := c.wait(ctx, id, k)
		return err
	}, nil
}

// Reset kills every non-persistent process and empties the given directories.
func (c *Client) Reset(ctx context.Context, req ResetRequest) (err error) {
	ctx, span := traceCall(ctx, msgReset)
	defer func() { endCall(span, err) }()
	b, _ := json.Marshal(req)
	id, k := c.newCall()
	if err := c.send(msgReset, id, b); err != nil {
		c.forgetCall(id)
		return err
	}
	_, err = c.wait(ctx, id, k)
	return err
}

func (c *Client) pathCall(ctx context.Context, typ byte, path string, data io.Writer, opts []FileOption) ([]byte, error) {
	return c.request(ctx, typ, pathRequest{Path: path, User: fileUser(opts)}, data)
}

// FileOption changes how the agent does a file operation.
type FileOption func(*fileOptions)

type fileOptions struct{ user string }

// AsUser does a file operation as user, a user of the sandbox's
// /etc/passwd: in a system sandbox (Hello.Users) the agent does it with
// that user's credentials, so what it makes is the user's and what the
// user may not touch it may not either; "" (as without the option) is the
// default user. Elsewhere only the agent's own user may be named.
func AsUser(user string) FileOption { return func(o *fileOptions) { o.user = user } }

func fileUser(opts []FileOption) string {
	var o fileOptions
	for _, opt := range opts {
		opt(&o)
	}
	return o.user
}

// request sends a request with req as its JSON payload and waits for the
// answer; data receives the msgFileData frames that come first.
func (c *Client) request(ctx context.Context, typ byte, req any, data io.Writer) (_ []byte, err error) {
	ctx, span := traceCall(ctx, typ)
	defer func() { endCall(span, err) }()
	b, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	id, k := c.newCall()
	k.data = data
	if err := c.send(typ, id, b); err != nil {
		c.forgetCall(id)
		return nil, err
	}
	payload, err := c.wait(ctx, id, k)
	if err == nil && k.werr != nil {
		err = k.werr
	}
	return payload, err
}

// ReadFile streams a regular file of the sandbox (under /workspace or /tmp)
// into w.
func (c *Client) ReadFile(ctx context.Context, path string, w io.Writer, opts ...FileOption) error {
	_, err := c.pathCall(ctx, msgFileRead, path, w, opts)
	return err
}

// List lists a directory of the sandbox (/workspace, or one under
// /workspace or /tmp), at most MaxListEntries entries.
func (c *Client) List(ctx context.Context, path string, opts ...FileOption) ([]Entry, error) {
	var l entryLines
	if _, err := c.pathCall(ctx, msgList, path, &l, opts); err != nil {
		return nil, err
	}
	return l.result()
}

// Remove removes a file or directory tree of the sandbox.
func (c *Client) Remove(ctx context.Context, path string, opts ...FileOption) error {
	_, err := c.pathCall(ctx, msgRemove, path, nil, opts)
	return err
}

// Forward makes the agent relay TCP connections on listen, inside the
// sandbox, to the unix socket at socket.
func (c *Client) Forward(ctx context.Context, listen, socket string) error {
	b, _ := json.Marshal(ForwardRequest{Listen: listen, Socket: socket})
	id, k := c.newCall()
	if err := c.send(msgForward, id, b); err != nil {
		c.forgetCall(id)
		return err
	}
	_, err := c.wait(ctx, id, k)
	return err
}

// ID is the process's id in the protocol: a zygote's, for StartRequest.Via.
func (p *Process) ID() uint32 { return p.id }
