package envd

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/corralhq/corral/internal/e2b/target"
	"github.com/corralhq/corral/internal/fault"
	"github.com/corralhq/corral/internal/live"
	"github.com/corralhq/corral/internal/stream"
	"github.com/corralhq/corral/sandbox"
)

// process.Process: a process started here is a process of the live
// sandbox (live.Sandbox.Start); its output stream is the process's event
// log (live.Process.Events), so Connect re-attaches to what a Start began,
// from the start of what is buffered.

var errInternal = errors.New("internal error; retry")

func (s *service) processHandlers(opts []connect.HandlerOption) map[string]http.Handler {
	const p = "/process.Process/"
	return map[string]http.Handler{
		p + "Start":       streamed(connect.NewServerStreamHandler(p+"Start", s.start, opts...)),
		p + "Connect":     streamed(connect.NewServerStreamHandler(p+"Connect", s.connect, opts...)),
		p + "List":        unary(connect.NewUnaryHandler(p+"List", s.list, opts...)),
		p + "SendInput":   unary(connect.NewUnaryHandler(p+"SendInput", s.sendInput, opts...)),
		p + "SendSignal":  unary(connect.NewUnaryHandler(p+"SendSignal", s.sendSignal, opts...)),
		p + "CloseStdin":  unary(connect.NewUnaryHandler(p+"CloseStdin", s.closeStdin, opts...)),
		p + "Update":      unary(connect.NewUnaryHandler(p+"Update", s.update, opts...)),
		p + "StreamInput": streamed(connect.NewClientStreamHandler(p+"StreamInput", s.streamInput, opts...)),
	}
}

// startRequest maps E2B's start request onto the live sandbox's.
func startRequest(m *StartRequest) (sandbox.StartProcessRequest, error) {
	if m.Process == nil || m.Process.Cmd == "" {
		return sandbox.StartProcessRequest{}, errors.New("process.cmd: name the program to run")
	}
	req := sandbox.StartProcessRequest{
		Cmd:   append([]string{m.Process.Cmd}, m.Process.Args...),
		Env:   sdkEnv(m.Process.Envs),
		Stdin: m.Stdin == nil || *m.Stdin, // envd keeps stdin open unless told not to
	}
	if m.Tag != nil {
		req.Tag = *m.Tag
	}
	// E2B's default working directory is the user's home; a relative one
	// is under it.
	req.Cwd = live.UserHome
	if m.Process.Cwd != nil && *m.Process.Cwd != "" {
		req.Cwd = home(*m.Process.Cwd)
	}
	if m.PTY != nil {
		if m.PTY.Size == nil {
			return sandbox.StartProcessRequest{}, errors.New("pty.size: give cols and rows")
		}
		size, err := ptySize(m.PTY.Size)
		if err != nil {
			return sandbox.StartProcessRequest{}, err
		}
		req.PTY = &size
	}
	return req, nil
}

// localeDefaults are variables E2B's SDKs set on every terminal they
// open, with the values they set. The sandbox sets its locale itself (LANG
// is C.UTF-8; a request may not override it): these values say the same,
// so they are dropped rather than refused. Other values are refused.
var localeDefaults = map[string]string{"LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}

func sdkEnv(env map[string]string) map[string]string {
	var out map[string]string
	for k, v := range env {
		if localeDefaults[k] == v {
			continue
		}
		if out == nil {
			out = make(map[string]string, len(env))
		}
		out[k] = v
	}
	return out
}

func ptySize(s *PTYSize) (sandbox.PTYSize, error) {
	if s.Cols < 1 || s.Rows < 1 || s.Cols > 65535 || s.Rows > 65535 {
		return sandbox.PTYSize{}, errors.New("pty.size: cols and rows are 1-65535")
	}
	return sandbox.PTYSize{Cols: uint16(s.Cols), Rows: uint16(s.Rows)}, nil
}

func (s *service) start(ctx context.Context, req *connect.Request[StartRequest], st *connect.ServerStream[StartResponse]) error {
	t := tgt(ctx)
	sreq, err := startRequest(req.Msg)
	if err != nil {
		return refuse(fault.InvalidArgument, err.Error())
	}
	if sreq.User, err = username(req.Header()); err != nil {
		return refuse(fault.InvalidArgument, err.Error())
	}
	p, err := on(s, t, func(sb *live.Sandbox) (*live.Process, error) { return sb.Start(ctx, sreq) })
	if err != nil {
		return classify(ctx, err, s.log).connect()
	}
	if d, ok := connectTimeout(req.Header()); ok {
		s.killAfter(t, p, d)
	}
	return s.follow(ctx, req.Header(), p, func(ev *ProcessEvent) error { return st.Send(&StartResponse{Event: ev}) })
}

func (s *service) connect(ctx context.Context, req *connect.Request[ConnectRequest], st *connect.ServerStream[ConnectResponse]) error {
	t := tgt(ctx)
	p, err := s.resolve(t, req.Msg.Process)
	if err != nil {
		return err
	}
	return s.follow(ctx, req.Header(), p, func(ev *ProcessEvent) error { return st.Send(&ConnectResponse{Event: ev}) })
}

// connectTimeout reads the call's Connect-Timeout-Ms (none, or 0: no
// timeout).
func connectTimeout(h http.Header) (time.Duration, bool) {
	v := h.Get("Connect-Timeout-Ms")
	if v == "" || len(v) > 10 {
		return 0, false
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms <= 0 {
		return 0, false
	}
	return time.Duration(ms) * time.Millisecond, true
}

// killAfter kills a process d after its start, as envd does with a
// Start's timeout: the timeout bounds the process's life, not only the
// stream's (a client that leaves does not end the process; the timeout
// does). The process's own handle is signalled: a later process that
// reuses the pid is left alone.
func (s *service) killAfter(t target.Target, p *live.Process, d time.Duration) {
	time.AfterFunc(d, func() {
		if _, ended := p.Exit(); ended {
			return
		}
		err := p.Signal(context.Background(), syscall.SIGKILL)
		if err != nil && !errors.Is(err, live.ErrEnded) && !errors.Is(err, live.ErrNotFound) {
			s.log.Warn("envd: a process past its timeout could not be killed", "sandbox", t.SandboxID, "pid", p.PID(), "err", err)
		}
	})
}

// follow sends a process's events, from the first buffered, until the
// process ends (its end event is the last sent) or ctx does; a keep-alive
// goes when nothing else has for the client's interval.
func (s *service) follow(ctx context.Context, h http.Header, p *live.Process, send func(*ProcessEvent) error) error {
	pty := p.Info().PTY != nil
	keepalive := messages(func() error { return send(&ProcessEvent{Keepalive: &KeepAlive{}}) })
	return stream.Follow(ctx, p.Follow(0), keepalive, func(ev sandbox.ProcessEvent) error {
		if pe := processEvent(ev, p, pty); pe != nil {
			return send(pe)
		}
		return nil
	}, s.keepaliveEvery(h))
}

// processEvent maps an event of p's log to envd's (nil: none; a note that
// output was dropped from the buffer has no envd form).
func processEvent(ev sandbox.ProcessEvent, p *live.Process, pty bool) *ProcessEvent {
	switch ev.Type {
	case sandbox.ProcessEventStart:
		return &ProcessEvent{Start: &StartEvent{PID: Uint32(ev.PID)}}
	case sandbox.ProcessEventStdout, sandbox.ProcessEventStderr:
		b := Bytes(ev.Data)
		switch {
		case pty:
			return &ProcessEvent{Data: &DataEvent{PTY: &b}}
		case ev.Type == sandbox.ProcessEventStdout:
			return &ProcessEvent{Data: &DataEvent{Stdout: &b}}
		default:
			return &ProcessEvent{Data: &DataEvent{Stderr: &b}}
		}
	case sandbox.ProcessEventEnd:
		x, ok := p.Exit()
		if !ok {
			return nil
		}
		return &ProcessEvent{End: endEvent(x)}
	}
	return nil
}

// endEvent describes a process's end as envd does (after Go's
// os.ProcessState): a process killed by a signal has exit code -1, is not
// "exited", and its status and error name the signal; a non-zero exit
// has the error "exit status N".
func endEvent(x live.Exit) *EndEvent {
	switch {
	case x.Ended != "":
		msg := "the sandbox ended before the process did"
		return &EndEvent{ExitCode: -1, Status: "sandbox ended", Error: &msg}
	case x.Signal != 0:
		status := "signal: " + x.Signal.String()
		return &EndEvent{ExitCode: -1, Status: status, Error: &status}
	}
	status := fmt.Sprintf("exit status %d", x.Code)
	e := &EndEvent{ExitCode: int32(x.Code), Exited: true, Status: status}
	if x.Code != 0 {
		e.Error = &status
	}
	return e
}

// resolve finds the process a selector names: by pid, or by tag (a running
// one first).
func (s *service) resolve(t target.Target, sel *ProcessSelector) (*live.Process, error) {
	if sel == nil || (sel.PID == nil && sel.Tag == nil) {
		return nil, refuse(fault.InvalidArgument, "process: give pid or tag")
	}
	sb, err := s.box(t)
	if err != nil {
		return nil, classify(context.Background(), err, s.log).connect()
	}
	if sel.PID != nil {
		p, err := sb.Process(int(*sel.PID))
		if err != nil {
			return nil, classify(context.Background(), err, s.log).connect()
		}
		return p, nil
	}
	procs, err := sb.Processes()
	if err != nil {
		return nil, classify(context.Background(), err, s.log).connect()
	}
	var found *live.Process
	var running bool
	for _, p := range procs {
		info := p.Info()
		if info.Tag == *sel.Tag && (found == nil || (info.Running && !running)) {
			found, running = p, info.Running
		}
	}
	if found == nil {
		return nil, classify(context.Background(), live.ErrNoProcess, s.log).connect()
	}
	return found, nil
}

func (s *service) list(ctx context.Context, _ *connect.Request[ListRequest]) (*connect.Response[ListResponse], error) {
	t := tgt(ctx)
	procs, err := on(s, t, func(sb *live.Sandbox) ([]*live.Process, error) { return sb.Processes() })
	if err != nil {
		return nil, classify(ctx, err, s.log).connect()
	}
	out := &ListResponse{Processes: []ProcessInfo{}}
	for _, h := range procs {
		p := h.Info()
		if !p.Running {
			continue // envd lists the running processes
		}
		cwd := p.Cwd
		pi := ProcessInfo{PID: Uint32(p.PID), Config: &ProcessConfig{Args: []string{}, Envs: map[string]string{}, Cwd: &cwd}}
		if len(p.Cmd) > 0 {
			pi.Config.Cmd, pi.Config.Args = p.Cmd[0], append(pi.Config.Args, p.Cmd[1:]...)
		}
		if p.Tag != "" {
			tag := p.Tag
			pi.Tag = &tag
		}
		out.Processes = append(out.Processes, pi)
	}
	return connect.NewResponse(out), nil
}

// input is the bytes of a ProcessInput: for its stdin, or typed at its
// terminal (both reach the process's stdin).
func input(in *ProcessInput) ([]byte, error) {
	switch {
	case in != nil && in.Stdin != nil:
		return *in.Stdin, nil
	case in != nil && in.PTY != nil:
		return *in.PTY, nil
	}
	return nil, refuse(fault.InvalidArgument, "input: give stdin or pty")
}

func (s *service) sendInput(ctx context.Context, req *connect.Request[SendInputRequest]) (*connect.Response[SendInputResponse], error) {
	t := tgt(ctx)
	data, err := input(req.Msg.Input)
	if err != nil {
		return nil, err
	}
	p, err := s.resolve(t, req.Msg.Process)
	if err != nil {
		return nil, err
	}
	if _, err := p.WriteStdin(ctx, bytes.NewReader(data)); err != nil {
		return nil, classify(ctx, err, s.log).connect()
	}
	return connect.NewResponse(&SendInputResponse{}), nil
}

// streamInput is StreamInput, as envd serves it: a start naming the
// process first, then its input in data messages, in order, keep-alives
// between. A process that does not read ends the stream as SendInput's
// call ends, saying how many bytes of the stream's input were accepted.
func (s *service) streamInput(ctx context.Context, st *connect.ClientStream[StreamInputRequest]) (*connect.Response[StreamInputResponse], error) {
	t := tgt(ctx)
	var p *live.Process
	var written int64
	for st.Receive() {
		m := st.Msg()
		switch {
		case m.Start != nil && p == nil:
			var err error
			if p, err = s.resolve(t, m.Start.Process); err != nil {
				return nil, err
			}
		case m.Start != nil:
			return nil, refuse(fault.InvalidArgument, "start: the stream names its process once, in its first message")
		case m.Data != nil && p == nil:
			return nil, refuse(fault.InvalidArgument, "the stream's first message is start, naming the process")
		case m.Data != nil:
			data, err := input(m.Data.Input)
			if err != nil {
				return nil, err
			}
			n, err := p.WriteStdin(ctx, bytes.NewReader(data))
			written += n
			var nr *live.NotReadingError
			if errors.As(err, &nr) {
				nr.Written = written // the stream's input, not this message's
			}
			if err != nil {
				return nil, classify(ctx, err, s.log).connect()
			}
		case m.Keepalive == nil:
			return nil, refuse(fault.InvalidArgument, "a message of the stream is start, data or keepalive")
		}
	}
	if err := st.Err(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&StreamInputResponse{}), nil
}

func (s *service) sendSignal(ctx context.Context, req *connect.Request[SendSignalRequest]) (*connect.Response[SendSignalResponse], error) {
	t := tgt(ctx)
	sig := req.Msg.Signal
	if sig < 1 || sig > 64 {
		return nil, refuse(fault.InvalidArgument, "signal: give SIGNAL_SIGKILL or SIGNAL_SIGTERM")
	}
	p, err := s.resolve(t, req.Msg.Process)
	if err != nil {
		return nil, err
	}
	if err := p.Signal(ctx, syscall.Signal(sig)); err != nil {
		return nil, classify(ctx, err, s.log).connect()
	}
	return connect.NewResponse(&SendSignalResponse{}), nil
}

func (s *service) closeStdin(ctx context.Context, req *connect.Request[CloseStdinRequest]) (*connect.Response[CloseStdinResponse], error) {
	t := tgt(ctx)
	p, err := s.resolve(t, req.Msg.Process)
	if err != nil {
		return nil, err
	}
	if err := p.CloseStdin(); err != nil {
		return nil, classify(ctx, err, s.log).connect()
	}
	return connect.NewResponse(&CloseStdinResponse{}), nil
}

func (s *service) update(ctx context.Context, req *connect.Request[UpdateRequest]) (*connect.Response[UpdateResponse], error) {
	t := tgt(ctx)
	p, err := s.resolve(t, req.Msg.Process)
	if err != nil {
		return nil, err
	}
	if req.Msg.PTY != nil && req.Msg.PTY.Size != nil {
		size, err := ptySize(req.Msg.PTY.Size)
		if err != nil {
			return nil, refuse(fault.InvalidArgument, err.Error())
		}
		if err := p.Resize(ctx, size); err != nil {
			return nil, classify(ctx, err, s.log).connect()
		}
	}
	return connect.NewResponse(&UpdateResponse{}), nil
}

// username is the user E2B's SDKs name for a call (opts.user): HTTP basic
// authentication with the name and an empty password. None is the default
// user.
func username(h http.Header) (string, error) {
	a := h.Get("Authorization")
	if a == "" {
		return "", nil
	}
	scheme, enc, _ := strings.Cut(a, " ")
	if !strings.EqualFold(scheme, "Basic") {
		return "", nil // not a user: another scheme is the server's business
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(enc))
	if err != nil {
		return "", errors.New("Authorization: basic credentials are not base64")
	}
	name, _, _ := strings.Cut(string(b), ":")
	return name, nil
}
