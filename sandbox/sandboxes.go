package sandbox

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// More sentinels of live sandboxes, matched by errors.Is against an
// *APIError.
var (
	// ErrNotImplemented: 501, the server does not support this yet (a
	// PTY, file watches).
	ErrNotImplemented = errors.New("corral: not implemented")
	// ErrProcessEnded: 409 process_ended, the process has ended (or its
	// stdin was closed).
	ErrProcessEnded = errors.New("corral: process ended")
	// ErrTooManyProcesses: 429 too_many_processes, the sandbox runs as
	// many processes as it may.
	ErrTooManyProcesses = errors.New("corral: too many processes")
	// ErrSandboxPaused: 409 sandbox_paused, the sandbox is paused (a call
	// that needs it running, or a second Pause); Resume it first.
	ErrSandboxPaused = errors.New("corral: sandbox paused")
	// ErrNotPaused: 409 not_paused, Resume of a sandbox that runs.
	ErrNotPaused = errors.New("corral: sandbox not paused")
)

// isLive matches the live sandbox sentinels; APIError.Is calls it.
func (e *APIError) isLive(target error) (bool, bool) {
	switch target {
	case ErrNotImplemented:
		return e.Status == http.StatusNotImplemented, true
	case ErrProcessEnded:
		return e.Status == http.StatusConflict && e.Code == "process_ended", true
	case ErrTooManyProcesses:
		return e.Status == http.StatusTooManyRequests && e.Code == "too_many_processes", true
	case ErrSandboxPaused:
		return e.Status == http.StatusConflict && e.Code == "sandbox_paused", true
	case ErrNotPaused:
		return e.Status == http.StatusConflict && e.Code == "not_paused", true
	}
	return false, false
}

// Sandbox is a handle on a live sandbox: its processes and files. Making
// one calls nothing; CreateSandbox makes the sandbox itself.
type Sandbox struct {
	c  *Client
	ID string
}

// Sandbox returns a handle on live sandbox id.
func (c *Client) Sandbox(id string) *Sandbox { return &Sandbox{c: c, ID: id} }

func (s *Sandbox) path() string { return "/v1/sandboxes/" + url.PathEscape(s.ID) }

// call sends a JSON call and decodes a JSON answer into out (nil: none).
func (c *Client) call(ctx context.Context, method, path string, in, out any, idempotent bool) error {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	r := request{method: method, path: path, idempotent: idempotent}
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("corral: encode %s %s: %w", method, path, err)
		}
		r.body = b
	}
	resp, err := c.do(ctx, r)
	if err != nil {
		return err
	}
	if out == nil {
		resp.Body.Close()
		return nil
	}
	return decode(resp, r, out)
}

// withQuery is path with q as its query, if any.
func withQuery(path string, q url.Values) string {
	if len(q) == 0 {
		return path
	}
	return path + "?" + q.Encode()
}

// allPages yields every item of the pages page fetches, from the one
// cursor names on, following each page's next cursor until one has none.
// It stops at the first error, which it yields.
func allPages[T any](page func(cursor string) ([]T, string, error), cursor string) iter.Seq2[*T, error] {
	return func(yield func(*T, error) bool) {
		for {
			items, next, err := page(cursor)
			if err != nil {
				yield(nil, err)
				return
			}
			for i := range items {
				if !yield(&items[i], nil) {
					return
				}
			}
			if next == "" {
				return
			}
			cursor = next
		}
	}
}

// CreateSandbox makes a live sandbox and returns a handle on it with its
// description. It is sent once, never retried.
func (c *Client) CreateSandbox(ctx context.Context, req CreateSandboxRequest) (*Sandbox, *Info, error) {
	var info Info
	if err := c.call(ctx, http.MethodPost, "/v1/sandboxes", req, &info, false); err != nil {
		return nil, nil, err
	}
	return c.Sandbox(info.SandboxID), &info, nil
}

// ListSandboxes lists the key's live sandboxes on every node of the
// server, those whose metadata hold every pair of match (nil: all).
func (c *Client) ListSandboxes(ctx context.Context, match map[string]string) ([]Info, error) {
	q := url.Values{}
	keys := make([]string, 0, len(match))
	for k := range match {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		q.Set("metadata."+k, match[k])
	}
	p := "/v1/sandboxes"
	if len(q) > 0 {
		p += "?" + q.Encode()
	}
	var l SandboxList
	if err := c.call(ctx, http.MethodGet, p, nil, &l, true); err != nil {
		return nil, err
	}
	return l.Sandboxes, nil
}

// Info describes the sandbox (ErrNotFound once it reached its timeout or
// was killed).
func (s *Sandbox) Info(ctx context.Context) (*Info, error) {
	var info Info
	if err := s.c.call(ctx, http.MethodGet, s.path(), nil, &info, true); err != nil {
		return nil, err
	}
	return &info, nil
}

// PortURL is the URL of port on the sandbox's loopback through the
// server's /v1 route: a request to it (with the API key) reaches the
// server a program in the sandbox listens with there, at PortURL's "/".
func (s *Sandbox) PortURL(port int) string {
	return s.c.endpoint + s.path() + "/ports/" + strconv.Itoa(port) + "/"
}

// SetTimeout makes the sandbox end d from now.
func (s *Sandbox) SetTimeout(ctx context.Context, d time.Duration) (*Info, error) {
	var info Info
	body := map[string]int64{"timeout_seconds": int64(d.Round(time.Second) / time.Second)}
	if err := s.c.call(ctx, http.MethodPost, s.path()+"/timeout", body, &info, true); err != nil {
		return nil, err
	}
	return &info, nil
}

// Pause pauses the sandbox and returns its description (State "paused").
// Its files are kept; on gVisor its memory too, so that its processes and
// code contexts go on after Resume (SandboxPause.Memory says which). While
// paused its timeout stops and calls that need it running fail with
// ErrSandboxPaused. Pausing a paused sandbox is ErrSandboxPaused.
func (s *Sandbox) Pause(ctx context.Context) (*Info, error) {
	var info Info
	if err := s.c.call(ctx, http.MethodPost, s.path()+"/pause", nil, &info, false); err != nil {
		return nil, err
	}
	return &info, nil
}

// Resume resumes a paused sandbox with its whole timeout; the answer's
// Resume says what was kept (without memory, its processes and contexts
// were lost). Resuming a sandbox that runs is ErrNotPaused.
func (s *Sandbox) Resume(ctx context.Context) (*Info, error) {
	var info Info
	if err := s.c.call(ctx, http.MethodPost, s.path()+"/resume", nil, &info, false); err != nil {
		return nil, err
	}
	return &info, nil
}

// Metrics returns the sandbox's readings of CPU, memory and disk, taken
// by its server every few seconds (the last hour's, kept in the server's
// memory), at or after since and before until (zero: no bound), oldest
// first. A new sandbox answers one reading, taken then.
func (s *Sandbox) Metrics(ctx context.Context, since, until time.Time) ([]SandboxMetric, error) {
	q := url.Values{}
	if !since.IsZero() {
		q.Set("since", since.Format(time.RFC3339Nano))
	}
	if !until.IsZero() {
		q.Set("until", until.Format(time.RFC3339Nano))
	}
	p := s.path() + "/metrics"
	if len(q) > 0 {
		p += "?" + q.Encode()
	}
	var m SandboxMetrics
	if err := s.c.call(ctx, http.MethodGet, p, nil, &m, true); err != nil {
		return nil, err
	}
	return m.Metrics, nil
}

// Kill ends the sandbox, its processes and its files.
func (s *Sandbox) Kill(ctx context.Context) error {
	return s.c.call(ctx, http.MethodDelete, s.path(), nil, nil, true)
}

// Start starts a process (it runs on after the call, until it exits or
// the sandbox ends) and returns a handle on it.
func (s *Sandbox) Start(ctx context.Context, req StartProcessRequest) (*Process, error) {
	var info ProcessInfo
	if err := s.c.call(ctx, http.MethodPost, s.path()+"/processes", req, &info, false); err != nil {
		return nil, err
	}
	return &Process{s: s, PID: info.PID, Started: info}, nil
}

// Processes lists the sandbox's processes: those running and the latest
// that ended.
func (s *Sandbox) Processes(ctx context.Context) ([]ProcessInfo, error) {
	var l ProcessList
	if err := s.c.call(ctx, http.MethodGet, s.path()+"/processes", nil, &l, true); err != nil {
		return nil, err
	}
	return l.Processes, nil
}

// Process returns a handle on a process of the sandbox, started by this
// client or another.
func (s *Sandbox) Process(pid int) *Process { return &Process{s: s, PID: pid} }

// Process is a handle on a process of a live sandbox.
type Process struct {
	s   *Sandbox
	PID int
	// Started is the process as Start answered (zero for a handle made
	// by Sandbox.Process).
	Started ProcessInfo
}

func (p *Process) path() string { return p.s.path() + "/processes/" + strconv.Itoa(p.PID) }

// Info describes the process now.
func (p *Process) Info(ctx context.Context) (*ProcessInfo, error) {
	var info ProcessInfo
	if err := p.s.c.call(ctx, http.MethodGet, p.path(), nil, &info, true); err != nil {
		return nil, err
	}
	return &info, nil
}

// Wait waits for the process to end and returns how it ended. It is
// bounded by ctx, not Config.Timeout.
func (p *Process) Wait(ctx context.Context) (*ProcessExit, error) {
	r := request{method: http.MethodGet, path: p.path() + "?wait=true", idempotent: true}
	resp, err := p.s.c.do(ctx, r)
	if err != nil {
		return nil, err
	}
	var info ProcessInfo
	if err := decode(resp, r, &info); err != nil {
		return nil, err
	}
	if info.Exit == nil {
		return nil, &TransportError{Op: "GET " + p.path(), Err: errors.New("the answer has no exit")}
	}
	return info.Exit, nil
}

// WriteStdin sends r to the process's stdin (started with Stdin). It is
// sent once, never retried.
func (p *Process) WriteStdin(ctx context.Context, r io.Reader) error {
	ctx, cancel := p.s.c.callContext(ctx)
	defer cancel()
	resp, err := p.s.c.do(ctx, request{method: http.MethodPost, path: p.path() + "/stdin", stream: r, contentType: "application/octet-stream"})
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// CloseStdin closes the process's stdin: it reads end of file.
func (p *Process) CloseStdin(ctx context.Context) error {
	return p.s.c.call(ctx, http.MethodPost, p.path()+"/stdin/close", nil, nil, false)
}

// Resize changes the size of the process's terminal (started with a PTY).
func (p *Process) Resize(ctx context.Context, size PTYSize) error {
	return p.s.c.call(ctx, http.MethodPost, p.path()+"/resize", size, nil, true)
}

// Signal sends a signal, by name ("SIGTERM") or number ("15"), to the
// process and its process group.
func (p *Process) Signal(ctx context.Context, sig string) error {
	body := map[string]any{"signal": sig}
	if n, err := strconv.Atoi(sig); err == nil {
		body["signal"] = n
	}
	return p.s.c.call(ctx, http.MethodPost, p.path()+"/signal", body, nil, true)
}

// Events follows the process's events: its start, its output as it comes
// (first what the server buffered, if the process ran before this call),
// and its end, after which the sequence ends. A broken connection resumes
// after the last event received. An error ends the sequence and is its
// last element. It is bounded by ctx, not Config.Timeout.
//
//	for ev, err := range proc.Events(ctx, 0) {
//		if err != nil { ... }
//		switch ev.Type {
//		case sandbox.ProcessEventStdout:
//			os.Stdout.Write(ev.Data)
//		case sandbox.ProcessEventEnd:
//			code = ev.Exit.ExitCode
//		}
//	}
func (p *Process) Events(ctx context.Context, after uint64) iter.Seq2[ProcessEvent, error] {
	return func(yield func(ProcessEvent, error) bool) {
		failures := 0
		for {
			n, done, err := p.eventsOnce(ctx, after, func(ev ProcessEvent) bool {
				after = max(after, ev.Seq)
				return yield(ev, nil)
			})
			if done {
				return
			}
			var ae *APIError
			if ctx.Err() != nil || errors.As(err, &ae) && !ae.temporary() {
				if err == nil {
					err = ctx.Err()
				}
				yield(ProcessEvent{}, err)
				return
			}
			if n > 0 {
				failures = 0
			}
			if failures++; failures > max(p.s.c.maxRetries, 2) {
				if err == nil {
					err = &TransportError{Op: "GET " + p.path() + "/events", Err: io.ErrUnexpectedEOF}
				}
				yield(ProcessEvent{}, err)
				return
			}
			if serr := sleep(ctx, jitter(p.s.c.backoff<<min(failures-1, 10), 5*time.Second)); serr != nil {
				yield(ProcessEvent{}, serr)
				return
			}
		}
	}
}

// eventsOnce reads one connection's events after after.
func (p *Process) eventsOnce(ctx context.Context, after uint64, emit func(ProcessEvent) bool) (int, bool, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	h := http.Header{"Accept": {"text/event-stream"}}
	if after > 0 {
		h.Set("Last-Event-ID", strconv.FormatUint(after, 10))
	}
	r := request{method: http.MethodGet, path: p.path() + "/events", header: h}
	resp, err := p.s.c.send(ctx, r)
	if err != nil {
		return 0, false, &TransportError{Op: "GET " + r.path, Err: err}
	}
	if resp.StatusCode != http.StatusOK {
		return 0, false, readAPIError(resp)
	}
	defer resp.Body.Close()
	idle := time.AfterFunc(45*time.Second, cancel)
	defer idle.Stop()
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	var data strings.Builder
	n := 0
	for {
		line, err := readLine(br)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return n, false, nil
			}
			return n, false, &TransportError{Op: "GET " + r.path, Err: err}
		}
		idle.Reset(45 * time.Second)
		if v, ok := strings.CutPrefix(line, "data:"); ok {
			data.WriteString(strings.TrimPrefix(v, " "))
			continue
		}
		if line != "" || data.Len() == 0 {
			continue // id, event (also in the data), comments
		}
		var ev ProcessEvent
		err = json.Unmarshal([]byte(data.String()), &ev)
		data.Reset()
		if err != nil {
			return n, false, &TransportError{Op: "GET " + r.path, Err: fmt.Errorf("decode event: %w", err)}
		}
		if ev.Seq <= after && ev.Type != ProcessEventDropped {
			continue
		}
		n++
		if !emit(ev) || ev.Type == ProcessEventEnd {
			return n, true, nil
		}
	}
}

// Run starts a process, collects its output until it ends and returns it
// with its exit: the short form of Start, Events and Wait.
func (s *Sandbox) Run(ctx context.Context, req StartProcessRequest) (stdout, stderr []byte, exit *ProcessExit, err error) {
	p, err := s.Start(ctx, req)
	if err != nil {
		return nil, nil, nil, err
	}
	for ev, err := range p.Events(ctx, 0) {
		if err != nil {
			return stdout, stderr, nil, err
		}
		switch ev.Type {
		case ProcessEventStdout:
			stdout = append(stdout, ev.Data...)
		case ProcessEventStderr:
			stderr = append(stderr, ev.Data...)
		case ProcessEventEnd:
			exit = ev.Exit
		}
	}
	if exit == nil {
		return stdout, stderr, nil, &TransportError{Op: "GET " + p.path() + "/events", Err: io.ErrUnexpectedEOF}
	}
	return stdout, stderr, exit, nil
}

// Files is a live sandbox's file system: paths are absolute (under
// /workspace or /tmp) or relative to /workspace.
type Files struct{ s *Sandbox }

// Files returns the sandbox's files.
func (s *Sandbox) Files() Files { return Files{s} }

func (f Files) path(op, p string) string {
	return f.s.path() + "/files" + op + "?path=" + url.QueryEscape(p)
}

// Read copies a file into w, streamed.
func (f Files) Read(ctx context.Context, p string, w io.Writer) error {
	ctx, cancel := f.s.c.callContext(ctx)
	defer cancel()
	r := request{method: http.MethodGet, path: f.path("", p), idempotent: true}
	resp, err := f.s.c.do(ctx, r)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(w, resp.Body); err != nil {
		return &TransportError{Op: "GET " + pathOnly(r.path), Err: err}
	}
	return nil
}

// Write writes r to a file, streamed, making its directories; it is sent
// once, never retried.
func (f Files) Write(ctx context.Context, p string, r io.Reader) (*SandboxFile, error) {
	ctx, cancel := f.s.c.callContext(ctx)
	defer cancel()
	req := request{method: http.MethodPut, path: f.path("", p), stream: r, contentType: "application/octet-stream"}
	resp, err := f.s.c.do(ctx, req)
	if err != nil {
		return nil, err
	}
	var out SandboxFile
	if err := decode(resp, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// List lists a directory down to depth levels (1: its own entries).
func (f Files) List(ctx context.Context, dir string, depth int) ([]SandboxFile, error) {
	var l SandboxFileList
	p := f.path("/list", dir) + "&depth=" + strconv.Itoa(max(depth, 1))
	if err := f.s.c.call(ctx, http.MethodGet, p, nil, &l, true); err != nil {
		return nil, err
	}
	return l.Entries, nil
}

// Stat describes a file or directory.
func (f Files) Stat(ctx context.Context, p string) (*SandboxFile, error) {
	var out SandboxFile
	if err := f.s.c.call(ctx, http.MethodGet, f.path("/stat", p), nil, &out, true); err != nil {
		return nil, err
	}
	return &out, nil
}

// Remove removes a file or directory tree.
func (f Files) Remove(ctx context.Context, p string) error {
	return f.s.c.call(ctx, http.MethodDelete, f.path("", p), nil, nil, true)
}

// MakeDir makes a directory (with parents, those on the way too, and one
// already there is no error).
func (f Files) MakeDir(ctx context.Context, p string, parents bool) (*SandboxFile, error) {
	var out SandboxFile
	body := map[string]any{"path": p, "parents": parents}
	if err := f.s.c.call(ctx, http.MethodPost, f.s.path()+"/files/mkdir", body, &out, true); err != nil {
		return nil, err
	}
	return &out, nil
}

// Move renames a file or directory; what is at to is replaced.
func (f Files) Move(ctx context.Context, from, to string) (*SandboxFile, error) {
	var out SandboxFile
	if err := f.s.c.call(ctx, http.MethodPost, f.s.path()+"/files/move", map[string]string{"from": from, "to": to}, &out, false); err != nil {
		return nil, err
	}
	return &out, nil
}

// Watch follows the changes under a directory (with recursive, under its
// subdirectories too) until ctx ends or the watch ends by itself (an event
// with op "end": the directory went, or the sandbox). An overflow event
// says changes were lost: list the directory again. A broken connection
// ends the sequence with an error (changes meanwhile are not replayed).
func (f Files) Watch(ctx context.Context, dir string, recursive bool) iter.Seq2[FileEvent, error] {
	return func(yield func(FileEvent, error) bool) {
		p := f.path("/watch", dir)
		if recursive {
			p += "&recursive=true"
		}
		r := request{method: http.MethodGet, path: p, header: http.Header{"Accept": {"text/event-stream"}}}
		resp, err := f.s.c.send(ctx, r)
		if err != nil {
			yield(FileEvent{}, &TransportError{Op: "GET " + pathOnly(p), Err: err})
			return
		}
		if resp.StatusCode != http.StatusOK {
			yield(FileEvent{}, readAPIError(resp))
			return
		}
		defer resp.Body.Close()
		br := bufio.NewReaderSize(resp.Body, 64<<10)
		for {
			line, err := readLine(br)
			if err != nil {
				if ctx.Err() != nil {
					err = ctx.Err()
				}
				yield(FileEvent{}, &TransportError{Op: "GET " + pathOnly(p), Err: err})
				return
			}
			v, ok := strings.CutPrefix(line, "data:")
			if !ok {
				continue
			}
			var ev FileEvent
			if err := json.Unmarshal([]byte(strings.TrimSpace(v)), &ev); err != nil {
				yield(FileEvent{}, &TransportError{Op: "GET " + pathOnly(p), Err: fmt.Errorf("decode event: %w", err)})
				return
			}
			if !yield(ev, nil) || ev.Op == "end" {
				return
			}
		}
	}
}
