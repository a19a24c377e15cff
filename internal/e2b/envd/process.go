package envd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"path"
	"strconv"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/internal/e2b/target"
	"github.com/corralhq/corral/internal/session"
	"github.com/corralhq/corral/sandbox"
)

// process.Process: a process started here is a process of the live
// sandbox (session.Manager.StartProcess); its output stream is the
// process's event log (session.Output), so Connect re-attaches to what a
// Start began, from the start of what is buffered.

var errInternal = errors.New("internal error; retry")

func (s *service) processHandlers(opts []connect.HandlerOption) map[string]http.Handler {
	const p = "/process.Process/"
	return map[string]http.Handler{
		p + "Start":      connect.NewServerStreamHandler(p+"Start", s.start, opts...),
		p + "Connect":    connect.NewServerStreamHandler(p+"Connect", s.connect, opts...),
		p + "List":       connect.NewUnaryHandler(p+"List", s.list, opts...),
		p + "SendInput":  connect.NewUnaryHandler(p+"SendInput", s.sendInput, opts...),
		p + "SendSignal": connect.NewUnaryHandler(p+"SendSignal", s.sendSignal, opts...),
		p + "CloseStdin": connect.NewUnaryHandler(p+"CloseStdin", s.closeStdin, opts...),
		p + "Update":     connect.NewUnaryHandler(p+"Update", s.update, opts...),
		p + "StreamInput": connect.NewClientStreamHandler(p+"StreamInput",
			func(context.Context, *connect.ClientStream[StreamInputRequest]) (*connect.Response[StreamInputResponse], error) {
				// E2B's JS SDK never calls it (fetch cannot stream a request);
				// SendInput does the same one message at a time.
				return nil, connect.NewError(connect.CodeUnimplemented, errors.New("StreamInput is not served; use SendInput"))
			}, opts...),
	}
}

// startRequest maps E2B's start request onto the session's.
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
	if m.Process.Cwd != nil && *m.Process.Cwd != "" {
		cwd := *m.Process.Cwd
		if !strings.HasPrefix(cwd, "/") {
			// Relative to the user's home: the sandbox's workspace.
			cwd = path.Join("/workspace", cwd)
		}
		req.Cwd = cwd
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
		return connect.NewError(connect.CodeInvalidArgument, err)
	}
	info, err := s.m.StartProcess(ctx, t.Tenant, t.SandboxID, sreq)
	if err != nil {
		return classify(err, s.log).connect()
	}
	if d, ok := connectTimeout(req.Header()); ok {
		s.killAfter(t, info, d)
	}
	return s.follow(ctx, req.Header(), t, info, func(ev *ProcessEvent) error { return st.Send(&StartResponse{Event: ev}) })
}

func (s *service) connect(ctx context.Context, req *connect.Request[ConnectRequest], st *connect.ServerStream[ConnectResponse]) error {
	t := tgt(ctx)
	info, err := s.resolve(t, req.Msg.Process)
	if err != nil {
		return err
	}
	return s.follow(ctx, req.Header(), t, info, func(ev *ProcessEvent) error { return st.Send(&ConnectResponse{Event: ev}) })
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
// does). The process is found again by pid and start time, so a later
// process that reuses the pid is left alone.
func (s *service) killAfter(t target.Target, p sandbox.ProcessInfo, d time.Duration) {
	time.AfterFunc(d, func() {
		procs, err := s.m.Processes(t.Tenant, t.SandboxID)
		if err != nil {
			return // the sandbox is gone, and the process with it
		}
		for _, q := range procs {
			if q.PID != p.PID || !q.StartedAt.Equal(p.StartedAt) || !q.Running {
				continue
			}
			err := s.m.Signal(context.Background(), t.Tenant, t.SandboxID, p.PID, syscall.SIGKILL)
			if err != nil && !errors.Is(err, session.ErrEnded) && !errors.Is(err, session.ErrNotFound) {
				s.log.Warn("envd: a process past its timeout could not be killed", "sandbox", t.SandboxID, "pid", p.PID, "err", err)
			}
		}
	})
}

// follow sends a process's events, from the first buffered, until the
// process ends (its end event is the last sent) or ctx does; a keep-alive
// goes when nothing else has for the client's interval.
func (s *service) follow(ctx context.Context, h http.Header, t target.Target, info sandbox.ProcessInfo, send func(*ProcessEvent) error) error {
	out, err := s.m.ProcessOutput(t.Tenant, t.SandboxID, info.PID)
	if err != nil {
		return classify(err, s.log).connect()
	}
	every := s.keepaliveEvery(h)
	tick := time.NewTicker(every)
	defer tick.Stop()
	var after uint64
	for {
		evs, changed, ended := out.Events(after)
		for _, ev := range evs {
			after = max(after, ev.Seq)
			pe := processEvent(ev, info.PTY != nil)
			if pe == nil {
				continue
			}
			if err := send(pe); err != nil {
				return err
			}
		}
		if len(evs) > 0 {
			tick.Reset(every)
		}
		if ended {
			return nil
		}
		select {
		case <-changed:
		case <-tick.C:
			if err := send(&ProcessEvent{Keepalive: &KeepAlive{}}); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// processEvent maps an event of the session's log to envd's (nil: none;
// a note that output was dropped from the buffer has no envd form).
func processEvent(ev sandbox.ProcessEvent, pty bool) *ProcessEvent {
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
		if ev.Exit == nil {
			return nil
		}
		return &ProcessEvent{End: endEvent(*ev.Exit)}
	}
	return nil
}

// endEvent describes a process's end as envd does (after Go's
// os.ProcessState): a process killed by a signal has exit code -1, is not
// "exited", and its status and error name the signal; a non-zero exit
// has the error "exit status N".
func endEvent(x sandbox.ProcessExit) *EndEvent {
	switch {
	case x.Error != "":
		msg := "the sandbox ended before the process did"
		return &EndEvent{ExitCode: -1, Status: "sandbox ended", Error: &msg}
	case x.Signal != "":
		status := "signal: " + strings.ToLower(x.Signal)
		if sig := unix.SignalNum(x.Signal); sig != 0 {
			status = "signal: " + sig.String()
		}
		return &EndEvent{ExitCode: -1, Status: status, Error: &status}
	}
	status := fmt.Sprintf("exit status %d", x.ExitCode)
	e := &EndEvent{ExitCode: int32(x.ExitCode), Exited: true, Status: status}
	if x.ExitCode != 0 {
		e.Error = &status
	}
	return e
}

// resolve finds the process a selector names: by pid, or by tag (a running
// one first).
func (s *service) resolve(t target.Target, sel *ProcessSelector) (sandbox.ProcessInfo, error) {
	if sel == nil || (sel.PID == nil && sel.Tag == nil) {
		return sandbox.ProcessInfo{}, connect.NewError(connect.CodeInvalidArgument, errors.New("process: give pid or tag"))
	}
	procs, err := s.m.Processes(t.Tenant, t.SandboxID)
	if err != nil {
		return sandbox.ProcessInfo{}, classify(err, s.log).connect()
	}
	var found *sandbox.ProcessInfo
	for i, p := range procs {
		switch {
		case sel.PID != nil && p.PID == int(*sel.PID):
			return p, nil
		case sel.PID == nil && p.Tag == *sel.Tag && (found == nil || (p.Running && !found.Running)):
			found = &procs[i]
		}
	}
	if found != nil {
		return *found, nil
	}
	return sandbox.ProcessInfo{}, classify(session.ErrNoProcess, s.log).connect()
}

func (s *service) list(ctx context.Context, _ *connect.Request[ListRequest]) (*connect.Response[ListResponse], error) {
	t := tgt(ctx)
	procs, err := s.m.Processes(t.Tenant, t.SandboxID)
	if err != nil {
		return nil, classify(err, s.log).connect()
	}
	out := &ListResponse{Processes: []ProcessInfo{}}
	for _, p := range procs {
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

func (s *service) sendInput(ctx context.Context, req *connect.Request[SendInputRequest]) (*connect.Response[SendInputResponse], error) {
	t := tgt(ctx)
	in := req.Msg.Input
	if in == nil || (in.Stdin == nil && in.PTY == nil) {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("input: give stdin or pty"))
	}
	data := in.Stdin
	if data == nil {
		data = in.PTY
	}
	p, err := s.resolve(t, req.Msg.Process)
	if err != nil {
		return nil, err
	}
	if _, err := s.m.WriteStdin(ctx, t.Tenant, t.SandboxID, p.PID, bytes.NewReader(*data)); err != nil {
		return nil, classify(err, s.log).connect()
	}
	return connect.NewResponse(&SendInputResponse{}), nil
}

func (s *service) sendSignal(ctx context.Context, req *connect.Request[SendSignalRequest]) (*connect.Response[SendSignalResponse], error) {
	t := tgt(ctx)
	sig := req.Msg.Signal
	if sig < 1 || sig > 64 {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("signal: give SIGNAL_SIGKILL or SIGNAL_SIGTERM"))
	}
	p, err := s.resolve(t, req.Msg.Process)
	if err != nil {
		return nil, err
	}
	if err := s.m.Signal(ctx, t.Tenant, t.SandboxID, p.PID, syscall.Signal(sig)); err != nil {
		return nil, classify(err, s.log).connect()
	}
	return connect.NewResponse(&SendSignalResponse{}), nil
}

func (s *service) closeStdin(ctx context.Context, req *connect.Request[CloseStdinRequest]) (*connect.Response[CloseStdinResponse], error) {
	t := tgt(ctx)
	p, err := s.resolve(t, req.Msg.Process)
	if err != nil {
		return nil, err
	}
	if err := s.m.CloseStdin(t.Tenant, t.SandboxID, p.PID); err != nil {
		return nil, classify(err, s.log).connect()
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
			return nil, connect.NewError(connect.CodeInvalidArgument, err)
		}
		if err := s.m.Resize(ctx, t.Tenant, t.SandboxID, p.PID, size); err != nil {
			return nil, classify(err, s.log).connect()
		}
	}
	return connect.NewResponse(&UpdateResponse{}), nil
}
