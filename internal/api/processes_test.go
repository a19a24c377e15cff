package api

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/agent"
	"github.com/corralhq/corral/sandbox"
)

// start starts a process in box and returns its description.
func (s *stack) start(key, box string, req sandbox.StartProcessRequest) sandbox.ProcessInfo {
	s.t.Helper()
	var p sandbox.ProcessInfo
	s.call(key, "POST", "/v1/sandboxes/"+box+"/processes", jsonOf(s.t, req), http.StatusCreated, &p)
	if p.PID <= 0 || !p.Running && p.Exit == nil {
		s.t.Fatalf("started %+v", p)
	}
	return p
}

// wait waits for process pid of box to end (GET ?wait=true).
func (s *stack) wait(key, box string, pid int) sandbox.ProcessInfo {
	s.t.Helper()
	var p sandbox.ProcessInfo
	s.call(key, "GET", fmt.Sprintf("/v1/sandboxes/%s/processes/%d?wait=true", box, pid), "", http.StatusOK, &p)
	if p.Running || p.Exit == nil {
		s.t.Fatalf("waited for %+v", p)
	}
	return p
}

// processEvents reads the whole event stream of process pid of box, with
// hdr (Last-Event-ID).
func (s *stack) processEvents(key, box string, pid int, hdr ...string) []sandbox.ProcessEvent {
	s.t.Helper()
	r := s.call(key, "GET", fmt.Sprintf("/v1/sandboxes/%s/processes/%d/events", box, pid), "", http.StatusOK, nil, hdr...)
	var out []sandbox.ProcessEvent
	for _, ev := range events(s.t, r.body) {
		var pe sandbox.ProcessEvent
		if err := json.Unmarshal([]byte(ev.data), &pe); err != nil || pe.Type != ev.typ || pe.Seq != ev.id {
			s.t.Fatalf("event %+v: %+v, %v", ev, pe, err)
		}
		out = append(out, pe)
	}
	return out
}

func outputOf(evs []sandbox.ProcessEvent) (stdout, stderr string) {
	for _, ev := range evs {
		switch ev.Type {
		case sandbox.ProcessEventStdout:
			stdout += string(ev.Data)
		case sandbox.ProcessEventStderr:
			stderr += string(ev.Data)
		}
	}
	return stdout, stderr
}

// TestProcesses: a process runs, is waited for, listed and replayed as
// events (from an event on, with Last-Event-ID); stdin, signals and
// terminal sizes reach it or are refused for what it is.
func TestProcesses(t *testing.T) {
	s := newStack(t, func(o *options) { o.idle = true })
	s.createBox(keyAlpha, "box", nil)
	p := s.start(keyAlpha, "box", sandbox.StartProcessRequest{Shell: "echo out; echo err >&2; exit 4", Tag: "first"})
	if end := s.wait(keyAlpha, "box", p.PID); end.Exit.ExitCode != 4 || end.Tag != "first" {
		t.Errorf("ended %+v", end)
	}
	evs := s.processEvents(keyAlpha, "box", p.PID)
	if len(evs) < 3 || evs[0].Type != sandbox.ProcessEventStart || evs[len(evs)-1].Type != sandbox.ProcessEventEnd ||
		evs[len(evs)-1].Exit == nil || evs[len(evs)-1].Exit.ExitCode != 4 {
		t.Fatalf("events %+v", evs)
	}
	if out, errOut := outputOf(evs); out != "out\n" || errOut != "err\n" {
		t.Errorf("output %q, %q", out, errOut)
	}
	rest := s.processEvents(keyAlpha, "box", p.PID, "Last-Event-ID", fmt.Sprint(evs[0].Seq))
	if len(rest) != len(evs)-1 || rest[0].Seq != evs[1].Seq {
		t.Errorf("after %d: %+v; want %+v", evs[0].Seq, rest, evs[1:])
	}
	s.fail(keyAlpha, "GET", fmt.Sprintf("/v1/sandboxes/box/processes/%d/events", p.PID), "", http.StatusBadRequest,
		"invalid_request", "Last-Event-ID", "x")

	// stdin: written, closed; the program sees what was written.
	cat := s.start(keyAlpha, "box", sandbox.StartProcessRequest{Cmd: []string{"cat"}, Stdin: true})
	var written map[string]int64
	s.call(keyAlpha, "POST", fmt.Sprintf("/v1/sandboxes/box/processes/%d/stdin", cat.PID), "to cat\n", http.StatusOK, &written)
	if written["written"] != 7 {
		t.Errorf("written %v", written)
	}
	s.fail(keyAlpha, "POST", fmt.Sprintf("/v1/sandboxes/box/processes/%d/resize", cat.PID), `{"cols": 100, "rows": 30}`,
		http.StatusConflict, "no_terminal")
	s.call(keyAlpha, "POST", fmt.Sprintf("/v1/sandboxes/box/processes/%d/stdin/close", cat.PID), "", http.StatusNoContent, nil)
	if end := s.wait(keyAlpha, "box", cat.PID); end.Exit.ExitCode != 0 {
		t.Errorf("cat ended %+v", end.Exit)
	}
	if out, _ := outputOf(s.processEvents(keyAlpha, "box", cat.PID)); out != "to cat\n" {
		t.Errorf("cat printed %q", out)
	}
	for _, c := range []struct {
		pid  int
		code string
	}{{cat.PID, "process_ended"}, {p.PID, "no_stdin"}} {
		e, _ := s.fail(keyAlpha, "POST", fmt.Sprintf("/v1/sandboxes/box/processes/%d/stdin", c.pid), "late", http.StatusConflict, c.code)
		if e.Written == nil || *e.Written != 0 {
			t.Errorf("%s: written %v, want 0", c.code, e.Written)
		}
	}

	// Signals, by name or number; the default is SIGKILL.
	for _, sig := range []struct{ body, want string }{{`{"signal": "SIGTERM"}`, "SIGTERM"}, {`{"signal": 2}`, "SIGINT"}, {``, "SIGKILL"}} {
		sl := s.start(keyAlpha, "box", sandbox.StartProcessRequest{Cmd: []string{"sleep", "300"}})
		s.call(keyAlpha, "POST", fmt.Sprintf("/v1/sandboxes/box/processes/%d/signal", sl.PID), sig.body, http.StatusNoContent, nil)
		if end := s.wait(keyAlpha, "box", sl.PID); end.Exit.Signal != sig.want {
			t.Errorf("signal %s: ended %+v", sig.body, end.Exit)
		}
	}
	e, _ := s.fail(keyAlpha, "POST", fmt.Sprintf("/v1/sandboxes/box/processes/%d/signal", p.PID), `{"signal": "SIGNOPE"}`,
		http.StatusBadRequest, "invalid_request")
	if e.Field != "signal" {
		t.Errorf("a bad signal names %q", e.Field)
	}

	var l sandbox.ProcessList
	s.call(keyAlpha, "GET", "/v1/sandboxes/box/processes", "", http.StatusOK, &l)
	if len(l.Processes) != 5 || l.Processes[0].PID != p.PID {
		t.Errorf("listed %+v", l)
	}
	var one sandbox.ProcessInfo
	s.call(keyAlpha, "GET", fmt.Sprintf("/v1/sandboxes/box/processes/%d", p.PID), "", http.StatusOK, &one)
	if one.PID != p.PID || one.Running {
		t.Errorf("got %+v", one)
	}
	for _, pid := range []string{"0", "-1", "x", "99999"} {
		s.fail(keyAlpha, "GET", "/v1/sandboxes/box/processes/"+pid, "", http.StatusNotFound, "not_found")
	}
	// What the process request may not be.
	for _, body := range []string{`{"cmd": ["a"], "shell": "b"}`, `{"cmd": ["true"], "cwd": "rel"}`, `{"cmd": ["true"], "bogus": 1}`} {
		s.fail(keyAlpha, "POST", "/v1/sandboxes/box/processes", body, http.StatusBadRequest, "invalid_request")
	}
}

// TestTooManyProcesses: a sandbox runs max_processes at once; the next is
// refused until one ends.
func TestTooManyProcesses(t *testing.T) {
	s := newStack(t, func(o *options) { o.idle = true; o.live.MaxProcesses = 1 })
	s.createBox(keyAlpha, "box", nil)
	sl := s.start(keyAlpha, "box", sandbox.StartProcessRequest{Cmd: []string{"sleep", "300"}})
	s.fail(keyAlpha, "POST", "/v1/sandboxes/box/processes", `{"cmd": ["true"]}`, http.StatusTooManyRequests, "too_many_processes")
	s.call(keyAlpha, "POST", fmt.Sprintf("/v1/sandboxes/box/processes/%d/signal", sl.PID), "", http.StatusNoContent, nil)
	s.wait(keyAlpha, "box", sl.PID)
	s.start(keyAlpha, "box", sandbox.StartProcessRequest{Cmd: []string{"true"}})
}

// TestStdinNotReading: 4 MiB posted to the stdin of a process that does
// not read it is answered, once the process has taken none of it for the
// bound, 429 process_not_reading with Retry-After and the count of bytes
// accepted; the process, once it reads, gets exactly those, in order.
func TestStdinNotReading(t *testing.T) {
	s := newStack(t, func(o *options) { o.idle = true; o.live.StdinStall = 300 * time.Millisecond })
	s.createBox(keyAlpha, "box", nil)
	p := s.start(keyAlpha, "box", sandbox.StartProcessRequest{Stdin: true,
		Shell: "while [ ! -e go ]; do sleep 0.05; done; exec sha256sum"})
	stdin := fmt.Sprintf("/v1/sandboxes/box/processes/%d/stdin", p.PID)
	body := make([]byte, 4<<20)
	rand.Read(body)
	e, r := s.fail(keyAlpha, "POST", stdin, string(body), http.StatusTooManyRequests, "process_not_reading")
	if e.Written == nil || *e.Written < agent.StdinWindow || *e.Written >= int64(len(body)) ||
		!strings.Contains(e.Message, fmt.Sprintf("first %d bytes", *e.Written)) || r.header.Get("Retry-After") != "1" {
		t.Fatalf("%s (Retry-After %q): want the bytes accepted, a window or more and not all", r.body, r.header.Get("Retry-After"))
	}
	n := *e.Written
	if e, _ := s.fail(keyAlpha, "POST", stdin, "more", http.StatusTooManyRequests, "process_not_reading"); e.Written == nil || *e.Written != 0 {
		t.Errorf("a second write: written %v, want 0", e.Written)
	}
	s.call(keyAlpha, "PUT", "/v1/sandboxes/box/files?path=go", "", http.StatusOK, nil)
	s.call(keyAlpha, "POST", stdin+"/close", "", http.StatusNoContent, nil)
	if end := s.wait(keyAlpha, "box", p.PID); end.Exit.ExitCode != 0 {
		t.Fatalf("ended %+v", end.Exit)
	}
	sum := sha256.Sum256(body[:n])
	if out, _ := outputOf(s.processEvents(keyAlpha, "box", p.PID)); out != hex.EncodeToString(sum[:])+"  -\n" {
		t.Errorf("the process read %q, want the sum of the body's first %d bytes", out, n)
	}
}
