package envd

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/corralhq/corral/internal/e2b/target"
	"github.com/corralhq/corral/internal/engine"
	"github.com/corralhq/corral/internal/fleet"
	"github.com/corralhq/corral/internal/live"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/internal/workspace"
	"github.com/corralhq/corral/sandbox"
)

// TestMain serves as the agent of the fake sandboxes the tests use.
func TestMain(m *testing.M) {
	testenv.FakeMain(m)
}

// oneNode is a cluster of one node: every sandbox is this node's.
type oneNode struct{}

func (oneNode) Own(context.Context, string, string) (bool, error)            { return true, nil }
func (oneNode) Disown(context.Context, string, string) error                 { return nil }
func (oneNode) PublishSandbox(context.Context, string, string, []byte) error { return nil }

// harness is the envd handler over a real session manager on fake
// sandboxes, with live sandbox "box" of tenant "t", served over HTTP:
// base reaches it as (t, box); other as tenant "other" naming box.
type harness struct {
	t     testing.TB
	m     *live.Manager
	svc   *service
	base  string
	other string
	logs  *testenv.LogBuffer
}

// newHarness makes the harness on fake sandboxes; opts change the
// service before it serves.
func newHarness(t *testing.T, opts ...func(*service)) *harness {
	t.Helper()
	f := testenv.FakeEngine(t, func(c *engine.Config) { c.CacheDir = "" })
	return harnessOn(t, f.Engine, f.Fleet, sandbox.IsolationContainer, live.DefaultConfig(), opts...)
}

// harnessOn makes the harness on eng's sandboxes of tier, its live
// sandboxes configured by lc.
func harnessOn(t testing.TB, eng *engine.Engine, fl *fleet.Fleet, tier sandbox.Isolation, lc live.Config, opts ...func(*service)) *harness {
	t.Helper()
	logs := &testenv.LogBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	table, err := workspace.Open(t.Context(), workspace.Config{Dir: t.TempDir(), ReapInterval: time.Minute}, oneNode{}, log)
	if err != nil {
		t.Fatal(err)
	}
	m := live.New(lc, live.Deps{Table: table, Engine: eng, Fleet: fl, Publisher: oneNode{}, Log: log})
	t.Cleanup(m.Close) // before the engine's (cleanups run last-in first)
	if _, _, err := m.Create(t.Context(), "t", sandbox.CreateSandboxRequest{SandboxID: "box", Tier: tier}); err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, m: m, svc: newService(m, log), logs: logs}
	for _, o := range opts {
		o(h.svc)
	}
	serve := func(tg target.Target) string {
		inner := h.svc.handler()
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			inner.ServeHTTP(w, r.WithContext(target.With(r.Context(), tg)))
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	h.base = serve(target.Target{Tenant: "t", SandboxID: "box"})
	h.other = serve(target.Target{Tenant: "other", SandboxID: "box"})
	return h
}

// proc is process pid of sandbox box.
func (h *harness) proc(pid int) *live.Process {
	h.t.Helper()
	sb, err := h.m.Get("t", "box")
	if err != nil {
		h.t.Fatal(err)
	}
	p, err := sb.Process(pid)
	if err != nil {
		h.t.Fatal(err)
	}
	return p
}

// client is a connect-go client of one procedure with the JSON codec.
func client[Req, Res any](base, procedure string) *connect.Client[Req, Res] {
	return connect.NewClient[Req, Res](http.DefaultClient, base+procedure, connect.WithCodec(jsonCodec{}))
}

func ptr[T any](v T) *T { return &v }

// stream collects a process stream's events until it ends.
type events struct {
	pid            uint32
	stdout, stderr string
	pty            string
	end            *EndEvent
	keepalives     int
}

// collect reads a stream's events to its end; fresh says the stream's
// first event is still to come (it must be the start).
func collect(t testing.TB, fresh bool, recv func() bool, msg func() *ProcessEvent, err func() error) events {
	t.Helper()
	var e events
	first := fresh
	for recv() {
		ev := msg()
		switch {
		case ev == nil:
			t.Fatal("a message without an event")
		case first && ev.Start == nil:
			t.Fatalf("the first event is %+v, want start", ev)
		case ev.Start != nil:
			e.pid = uint32(ev.Start.PID)
		case ev.Data != nil && ev.Data.Stdout != nil:
			e.stdout += string(*ev.Data.Stdout)
		case ev.Data != nil && ev.Data.Stderr != nil:
			e.stderr += string(*ev.Data.Stderr)
		case ev.Data != nil && ev.Data.PTY != nil:
			e.pty += string(*ev.Data.PTY)
		case ev.End != nil:
			e.end = ev.End
		case ev.Keepalive != nil:
			e.keepalives++
		}
		first = false
	}
	if err := err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	return e
}

func (h *harness) run(ctx context.Context, req *StartRequest) events {
	h.t.Helper()
	st, err := client[StartRequest, StartResponse](h.base, "/process.Process/Start").CallServerStream(ctx, connect.NewRequest(req))
	if err != nil {
		h.t.Fatal(err)
	}
	defer st.Close()
	return collect(h.t, true, st.Receive, func() *ProcessEvent { return st.Msg().Event }, st.Err)
}

func shell(cmd string) *ProcessConfig {
	return &ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", cmd}}
}

func codeOf(err error) connect.Code { return connect.CodeOf(err) }

// TestStartOutputAndExit: commands.run's call: output by stream, a
// non-zero exit as envd reports it, the environment given.
func TestStartOutputAndExit(t *testing.T) {
	h := newHarness(t)
	cfg := shell(`echo out; echo "$GREETING" >&2; exit 3`)
	cfg.Envs = map[string]string{"GREETING": "hi there"}
	e := h.run(t.Context(), &StartRequest{Process: cfg, Stdin: ptr(false)})
	if e.pid == 0 || e.stdout != "out\n" || e.stderr != "hi there\n" {
		t.Errorf("pid %d stdout %q stderr %q", e.pid, e.stdout, e.stderr)
	}
	if e.end == nil || e.end.ExitCode != 3 || !e.end.Exited || e.end.Status != "exit status 3" || e.end.Error == nil || *e.end.Error != "exit status 3" {
		t.Errorf("end %+v", e.end)
	}
	ok := h.run(t.Context(), &StartRequest{Process: shell("true")})
	if ok.end == nil || ok.end.ExitCode != 0 || ok.end.Error != nil {
		t.Errorf("end of a success: %+v", ok.end)
	}
	// A locale of its own is refused (the sandbox sets it).
	st, err := client[StartRequest, StartResponse](h.base, "/process.Process/Start").CallServerStream(t.Context(),
		connect.NewRequest(&StartRequest{Process: &ProcessConfig{Cmd: "true", Envs: map[string]string{"LANG": "fr_FR.UTF-8"}}}))
	if err == nil {
		for st.Receive() {
		}
		err = st.Err()
	}
	if codeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("LANG=fr_FR.UTF-8: %v, want invalid_argument", err)
	}
	// A program that is not there is the caller's mistake.
	st, err = client[StartRequest, StartResponse](h.base, "/process.Process/Start").CallServerStream(t.Context(),
		connect.NewRequest(&StartRequest{Process: &ProcessConfig{Cmd: "/no/such/program"}}))
	if err == nil {
		for st.Receive() {
		}
		err = st.Err()
	}
	if codeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("a missing program: %v, want invalid_argument", err)
	}
}

// TestStdinConnectListSignal: a background process fed through
// SendInput, listed with its tag, re-attached to by tag (its output from
// the start), ended by CloseStdin; another killed by SendSignal.
func TestStdinConnectListSignal(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	st, err := client[StartRequest, StartResponse](h.base, "/process.Process/Start").CallServerStream(ctx,
		connect.NewRequest(&StartRequest{Process: &ProcessConfig{Cmd: "cat"}, Tag: ptr("feeder"), Stdin: ptr(true)}))
	if err != nil {
		t.Fatal(err)
	}
	if !st.Receive() || st.Msg().Event.Start == nil {
		t.Fatalf("no start event: %v", st.Err())
	}
	pid := st.Msg().Event.Start.PID
	st.Close() // the process goes on without its first client

	list, err := client[ListRequest, ListResponse](h.base, "/process.Process/List").CallUnary(ctx, connect.NewRequest(&ListRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if p := list.Msg.Processes; len(p) != 1 || p[0].PID != pid || p[0].Tag == nil || *p[0].Tag != "feeder" || p[0].Config.Cmd != "cat" {
		t.Errorf("List = %+v", p)
	}
	send := client[SendInputRequest, SendInputResponse](h.base, "/process.Process/SendInput")
	if _, err := send.CallUnary(ctx, connect.NewRequest(&SendInputRequest{Process: &ProcessSelector{PID: &pid},
		Input: &ProcessInput{Stdin: ptr(Bytes("hello\n"))}})); err != nil {
		t.Fatal(err)
	}
	conn, err := client[ConnectRequest, ConnectResponse](h.base, "/process.Process/Connect").CallServerStream(ctx,
		connect.NewRequest(&ConnectRequest{Process: &ProcessSelector{Tag: ptr("feeder")}}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// The replayed start, then what cat echoed.
	var got string
	for got != "hello\n" && conn.Receive() {
		if d := conn.Msg().Event.Data; d != nil && d.Stdout != nil {
			got += string(*d.Stdout)
		}
	}
	if got != "hello\n" {
		t.Fatalf("Connect gave %q, %v", got, conn.Err())
	}
	if _, err := client[CloseStdinRequest, CloseStdinResponse](h.base, "/process.Process/CloseStdin").CallUnary(ctx,
		connect.NewRequest(&CloseStdinRequest{Process: &ProcessSelector{PID: &pid}})); err != nil {
		t.Fatal(err)
	}
	var end *EndEvent
	for conn.Receive() {
		if e := conn.Msg().Event.End; e != nil {
			end = e
		}
	}
	if end == nil || end.ExitCode != 0 || conn.Err() != nil {
		t.Errorf("after CloseStdin: end %+v, %v", end, conn.Err())
	}
	if _, err := send.CallUnary(ctx, connect.NewRequest(&SendInputRequest{Process: &ProcessSelector{PID: &pid},
		Input: &ProcessInput{Stdin: ptr(Bytes("late"))}})); codeOf(err) != connect.CodeNotFound {
		t.Errorf("input to an ended process: %v, want not_found", err)
	}

	// Killed: envd's end for a signal.
	sleeper, err := client[StartRequest, StartResponse](h.base, "/process.Process/Start").CallServerStream(ctx,
		connect.NewRequest(&StartRequest{Process: &ProcessConfig{Cmd: "sleep", Args: []string{"300"}}, Stdin: ptr(false)}))
	if err != nil {
		t.Fatal(err)
	}
	defer sleeper.Close()
	if !sleeper.Receive() || sleeper.Msg().Event.Start == nil {
		t.Fatalf("no start event: %v", sleeper.Err())
	}
	spid := sleeper.Msg().Event.Start.PID
	signal := client[SendSignalRequest, SendSignalResponse](h.base, "/process.Process/SendSignal")
	if _, err := signal.CallUnary(ctx, connect.NewRequest(&SendSignalRequest{Process: &ProcessSelector{PID: &spid}, Signal: SignalSIGKILL})); err != nil {
		t.Fatal(err)
	}
	e := collect(t, false, sleeper.Receive, func() *ProcessEvent { return sleeper.Msg().Event }, sleeper.Err)
	if e.end == nil || e.end.ExitCode != -1 || e.end.Exited || e.end.Status != "signal: killed" {
		t.Errorf("end of a killed process: %+v", e.end)
	}
	// The SDK's kill answers false for not_found: an ended process, an
	// unknown one.
	for _, p := range []Uint32{spid, 999999} {
		if _, err := signal.CallUnary(ctx, connect.NewRequest(&SendSignalRequest{Process: &ProcessSelector{PID: &p}, Signal: SignalSIGKILL})); codeOf(err) != connect.CodeNotFound {
			t.Errorf("kill of pid %d: %v, want not_found", p, err)
		}
	}
	if _, err := signal.CallUnary(ctx, connect.NewRequest(&SendSignalRequest{Process: &ProcessSelector{PID: &spid}})); codeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("no signal: %v, want invalid_argument", err)
	}
}

// TestTerminal: pty.create's call: output as pty data, resized by
// Update, typed into by SendInput.
func TestTerminal(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	// The variables E2B's SDKs set on every terminal: the locale ones the
	// sandbox sets itself are dropped.
	cfg := shell("stty size; read line; stty size; echo got $line $TERM")
	cfg.Envs = map[string]string{"TERM": "xterm-256color", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
	st, err := client[StartRequest, StartResponse](h.base, "/process.Process/Start").CallServerStream(ctx,
		connect.NewRequest(&StartRequest{Process: cfg, PTY: &PTY{Size: &PTYSize{Cols: 100, Rows: 30}}}))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var out string
	var pid Uint32
	for !strings.Contains(out, "30 100") && st.Receive() {
		ev := st.Msg().Event
		if ev.Start != nil {
			pid = ev.Start.PID
		}
		if ev.Data != nil {
			if ev.Data.Stdout != nil || ev.Data.Stderr != nil {
				t.Fatalf("terminal output as %+v, want pty", ev.Data)
			}
			out += string(*ev.Data.PTY)
		}
	}
	if !strings.Contains(out, "30 100") {
		t.Fatalf("terminal said %q, %v", out, st.Err())
	}
	if _, err := client[UpdateRequest, UpdateResponse](h.base, "/process.Process/Update").CallUnary(ctx,
		connect.NewRequest(&UpdateRequest{Process: &ProcessSelector{PID: &pid}, PTY: &PTY{Size: &PTYSize{Cols: 120, Rows: 40}}})); err != nil {
		t.Fatal(err)
	}
	if _, err := client[SendInputRequest, SendInputResponse](h.base, "/process.Process/SendInput").CallUnary(ctx,
		connect.NewRequest(&SendInputRequest{Process: &ProcessSelector{PID: &pid}, Input: &ProcessInput{PTY: ptr(Bytes("typed\n"))}})); err != nil {
		t.Fatal(err)
	}
	rest := collect(t, false, st.Receive, func() *ProcessEvent { return st.Msg().Event }, st.Err)
	if !strings.Contains(rest.pty, "40 120") || !strings.Contains(rest.pty, "got typed xterm-256color") || rest.end == nil {
		t.Errorf("after a resize and a line: %q, end %+v", rest.pty, rest.end)
	}
}

// TestKeepalive: a quiet stream sends keep-alive events.
func TestKeepalive(t *testing.T) {
	h := newHarness(t, func(s *service) { s.keepalive = 20 * time.Millisecond })
	ctx := t.Context()
	st, err := client[StartRequest, StartResponse](h.base, "/process.Process/Start").CallServerStream(ctx,
		connect.NewRequest(&StartRequest{Process: &ProcessConfig{Cmd: "cat"}, Stdin: ptr(true)}))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var pid Uint32
	for st.Receive() {
		ev := st.Msg().Event
		if ev.Start != nil {
			pid = ev.Start.PID
		}
		if ev.Keepalive != nil {
			break
		}
	}
	if pid == 0 || st.Err() != nil {
		t.Fatalf("no keep-alive after the start: %v", st.Err())
	}
	if _, err := client[CloseStdinRequest, CloseStdinResponse](h.base, "/process.Process/CloseStdin").CallUnary(ctx,
		connect.NewRequest(&CloseStdinRequest{Process: &ProcessSelector{PID: &pid}})); err != nil {
		t.Fatal(err)
	}
	for st.Receive() {
	}
	if st.Err() != nil {
		t.Error(st.Err())
	}
	for v, want := range map[string]time.Duration{"50": 50 * time.Second, "0": time.Second, "x": defaultKeepalive, "": defaultKeepalive} {
		if got := (&service{}).keepaliveEvery(http.Header{"Keepalive-Ping-Interval": {v}}); got != want {
			t.Errorf("Keepalive-Ping-Interval %q: %v, want %v", v, got, want)
		}
	}
}

// envelope is one message of a Connect stream.
func envelope(flags byte, body []byte) []byte {
	b := make([]byte, 5, 5+len(body))
	b[0] = flags
	binary.BigEndian.PutUint32(b[1:], uint32(len(body)))
	return append(b, body...)
}

// readEnvelopes parses a Connect stream answer.
func readEnvelopes(t *testing.T, r io.Reader) (msgs []string, end string) {
	t.Helper()
	for {
		var hdr [5]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			t.Fatalf("stream cut before its end message: %v (messages %q)", err, msgs)
		}
		body := make([]byte, binary.BigEndian.Uint32(hdr[1:]))
		if _, err := io.ReadFull(r, body); err != nil {
			t.Fatal(err)
		}
		if hdr[0]&2 != 0 {
			return msgs, string(body)
		}
		msgs = append(msgs, string(body))
	}
}

func post(t testing.TB, url, ctype string, body []byte) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "POST", url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", ctype)
	req.Header.Set("Connect-Protocol-Version", "1")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Body.Close() })
	return res
}

// TestWire: what the JS SDK (connect-web, JSON) sends and reads, on the
// wire: a unary call, a stream's envelopes, proto3 JSON forms.
func TestWire(t *testing.T) {
	h := newHarness(t)
	res := post(t, h.base+"/process.Process/Start", "application/connect+json",
		envelope(0, []byte(`{"process":{"cmd":"/bin/bash","args":["-l","-c","printf 'a\\xffb'"],"envs":{}},"stdin":false,"future":1}`)))
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "application/connect+json" {
		t.Fatalf("stream answer %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	msgs, end := readEnvelopes(t, res.Body)
	if len(msgs) < 3 || !strings.HasPrefix(msgs[0], `{"event":{"start":{"pid":`) || end != "{}" {
		t.Fatalf("messages %q, end %q", msgs, end)
	}
	var data []string
	for _, m := range msgs[1 : len(msgs)-1] {
		data = append(data, m)
	}
	if strings.Join(data, "") != `{"event":{"data":{"stdout":"Yf9i"}}}` {
		t.Errorf("data %q, want the bytes a, 0xff, b in base64", data)
	}
	if last := msgs[len(msgs)-1]; last != `{"event":{"end":{"exitCode":0,"exited":true,"status":"exit status 0"}}}` {
		t.Errorf("end message %s", last)
	}

	// Unary: proto3 JSON in (a number as a string, snake_case ignored as
	// unknown), EntryInfo out with its enum by name and int64 as a string.
	res = post(t, h.base+"/filesystem.Filesystem/MakeDir", "application/json", []byte(`{"path":"d1"}`))
	if res.StatusCode != 200 {
		t.Fatalf("MakeDir %d", res.StatusCode)
	}
	res = post(t, h.base+"/filesystem.Filesystem/ListDir", "application/json", []byte(`{"path":"/home/user","depth":"1"}`))
	body, _ := io.ReadAll(res.Body)
	var list struct {
		Entries []map[string]any `json:"entries"`
	}
	if err := json.Unmarshal(body, &list); err != nil || res.StatusCode != 200 {
		t.Fatalf("ListDir %d %s", res.StatusCode, body)
	}
	var d1 map[string]any
	for _, e := range list.Entries {
		if e["name"] == "d1" {
			d1 = e
		}
	}
	if d1 == nil || d1["type"] != "FILE_TYPE_DIRECTORY" || d1["path"] != "/home/user/d1" || d1["permissions"] != "drwxr-xr-x" {
		t.Errorf("ListDir entry %v (of %s)", d1, body)
	}
	if _, ok := d1["size"].(string); !ok {
		t.Errorf("size %v is not a string", d1["size"])
	}
	if mt, _ := d1["modifiedTime"].(string); !strings.HasSuffix(mt, "Z") {
		t.Errorf("modifiedTime %v", d1["modifiedTime"])
	}
}

// TestMalformed: garbage bodies get Connect errors, and the server goes
// on serving.
func TestMalformed(t *testing.T) {
	h := newHarness(t)
	unary := map[string][]byte{
		"not JSON":       []byte("\x00\x01garbage"),
		"an array":       []byte(`[1,2]`),
		"a wrong type":   []byte(`{"path":12}`),
		"data after":     []byte(`{"path":"a"} {"path":"b"}`),
		"a bad depth":    []byte(`{"path":"a","depth":"-1"}`),
		"truncated":      []byte(`{"path":"a`),
		"a bad enum":     []byte(`{"process":{"pid":1},"signal":"SIGNAL_NOPE"}`),
		"bad base64":     []byte(`{"process":{"pid":1},"input":{"stdin":"!!!"}}`),
		"a huge pid":     []byte(`{"process":{"pid":4294967296},"signal":9}`),
		"pid of a float": []byte(`{"process":{"pid":1.5},"signal":9}`),
	}
	for name, body := range unary {
		proc := "/filesystem.Filesystem/ListDir"
		if strings.Contains(string(body), "process") {
			proc = "/process.Process/SendSignal"
		}
		if name == "bad base64" {
			proc = "/process.Process/SendInput"
		}
		res := post(t, h.base+proc, "application/json", body)
		b, _ := io.ReadAll(res.Body)
		var e struct{ Code, Message string }
		if err := json.Unmarshal(b, &e); err != nil || res.StatusCode != 400 || e.Code != "invalid_argument" {
			t.Errorf("%s: %d %s, want 400 invalid_argument", name, res.StatusCode, b)
		}
	}
	// Malformed frames: TestMalformedEnvelopes.
	// Not the JSON codec; not a procedure; a client stream's message
	// that is none of its kinds.
	if res := post(t, h.base+"/filesystem.Filesystem/Stat", "application/proto", []byte{0x0a, 0x01, 'a'}); res.StatusCode < 400 {
		t.Errorf("binary protobuf: %d", res.StatusCode)
	}
	if res := post(t, h.base+"/filesystem.Filesystem/Nope", "application/json", []byte(`{}`)); res.StatusCode != 404 {
		t.Errorf("an unknown procedure: %d", res.StatusCode)
	}
	res := post(t, h.base+"/process.Process/StreamInput", "application/connect+json", envelope(0, []byte(`{}`)))
	if _, end := readEnvelopes(t, res.Body); !strings.Contains(end, `"invalid_argument"`) {
		t.Errorf("StreamInput: %s", end)
	}
	// Still serving.
	if _, err := client[StatRequest, StatResponse](h.base, "/filesystem.Filesystem/Stat").CallUnary(t.Context(),
		connect.NewRequest(&StatRequest{Path: "/workspace"})); err != nil {
		t.Errorf("after the garbage: %v", err)
	}
}

// TestTargets: a request without a target is the dispatcher's fault
// (500); another tenant naming the sandbox reaches nothing (the sandbox
// "is not running" as E2B's SDKs read it).
func TestTargets(t *testing.T) {
	h := newHarness(t)
	srv := httptest.NewServer(h.svc.handler())
	defer srv.Close()
	if res := post(t, srv.URL+"/filesystem.Filesystem/Stat", "application/json", []byte(`{"path":"/workspace"}`)); res.StatusCode != 500 {
		t.Errorf("no target: %d", res.StatusCode)
	}
	if _, err := client[StatRequest, StatResponse](h.other, "/filesystem.Filesystem/Stat").CallUnary(t.Context(),
		connect.NewRequest(&StatRequest{Path: "/workspace"})); codeOf(err) != connect.CodeUnavailable {
		t.Errorf("another tenant's Stat: %v", err)
	}
	for base, want := range map[string]int{h.base: 204, h.other: 502} {
		res, err := http.Get(base + "/health")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != want {
			t.Errorf("health: %d, want %d", res.StatusCode, want)
		}
	}
	res, err := http.Get(h.other + "/files?path=a.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if b, _ := io.ReadAll(res.Body); res.StatusCode != 502 || !strings.HasPrefix(string(b), `{"code":502,"message":`) {
		t.Errorf("another tenant's download: %d %s", res.StatusCode, b)
	}
	if err := h.m.Kill(t.Context(), "t", "box"); err != nil {
		t.Fatal(err)
	}
	if res, err := http.Get(h.base + "/health"); err != nil || res.StatusCode != 502 {
		t.Errorf("health of a deleted sandbox: %v %v", res, err)
	}
}

func TestCodecForms(t *testing.T) {
	var sel struct {
		P Uint32 `json:"p"`
		Q Uint32 `json:"q"`
		R Uint32 `json:"r"`
		B Bytes  `json:"b"`
		C Bytes  `json:"c"`
		S Signal `json:"s"`
		N Signal `json:"n"`
	}
	in := `{"p":"7","q":8,"r":1e2,"b":"-_8","c":"+/8=","s":"SIGNAL_SIGTERM","n":9,"unknown":{"x":[1]}}`
	if err := (jsonCodec{}).Unmarshal([]byte(in), &sel); err != nil {
		t.Fatal(err)
	}
	if sel.P != 7 || sel.Q != 8 || sel.R != 100 || !bytes.Equal(sel.B, []byte{0xfb, 0xff}) || !bytes.Equal(sel.C, sel.B) || sel.S != SignalSIGTERM || sel.N != SignalSIGKILL {
		t.Errorf("decoded %+v", sel)
	}
	if err := (jsonCodec{}).Unmarshal(nil, &sel); err != nil {
		t.Errorf("an empty body is the empty message: %v", err)
	}
	b, err := (jsonCodec{}).Marshal(&EntryInfo{Name: "a<b", Type: FileSymlink, Size: 1 << 40, SymlinkTarget: ptr("x")})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"name":"a<b","type":"FILE_TYPE_SYMLINK","path":"","size":"1099511627776","mode":0,"permissions":"","owner":"","group":"","symlinkTarget":"x"}`; string(b) != want {
		t.Errorf("EntryInfo = %s\nwant %s", b, want)
	}
	var x struct{ T FileType }
	if err := json.Unmarshal([]byte(`{"T":"FILE_TYPE_NOPE"}`), &x); err == nil {
		t.Error("an unknown enum name was accepted")
	}
	// Proto names read as well as JSON names.
	var w WatchDirRequest
	if err := (jsonCodec{}).Unmarshal([]byte(`{"path":"/tmp","include_entry":true,"allow_network_mounts":true}`), &w); err != nil ||
		w != (WatchDirRequest{Path: "/tmp", IncludeEntry: true, AllowNetworkMounts: true}) {
		t.Errorf("WatchDirRequest = %+v, %v", w, err)
	}
	var g GetWatcherEventsRequest
	if err := (jsonCodec{}).Unmarshal([]byte(`{"watcher_id":"w1"}`), &g); err != nil || g.WatcherID != "w1" {
		t.Errorf("GetWatcherEventsRequest = %+v, %v", g, err)
	}
	if _, err := (protoRefused{}).Marshal(nil); !errors.Is(err, errBinary) {
		t.Error(err)
	}
}

// TestStartTimeout: a Start's timeout (Connect-Timeout-Ms) bounds the
// process's life, as envd's does, even after its client left; a Start
// without one leaves the process running.
func TestStartTimeout(t *testing.T) {
	h := newHarness(t)
	start := func(timeout time.Duration) Uint32 {
		t.Helper()
		ctx := t.Context()
		if timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		st, err := client[StartRequest, StartResponse](h.base, "/process.Process/Start").CallServerStream(ctx,
			connect.NewRequest(&StartRequest{Process: &ProcessConfig{Cmd: "sleep", Args: []string{"300"}}, Stdin: ptr(false)}))
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close() // the client leaves at once
		if !st.Receive() || st.Msg().Event.Start == nil {
			t.Fatalf("no start: %v", st.Err())
		}
		return st.Msg().Event.Start.PID
	}
	bounded, unbounded := start(300*time.Millisecond), start(0)
	info, err := h.proc(int(bounded)).Wait(t.Context())
	if err != nil || info.Exit == nil || info.Exit.Signal != "SIGKILL" {
		t.Fatalf("the process past its timeout: %+v, %v", info, err)
	}
	if info.Exit.EndedAt.Sub(info.StartedAt) < 300*time.Millisecond {
		t.Errorf("killed after %v, before its timeout", info.Exit.EndedAt.Sub(info.StartedAt))
	}
	if info := h.proc(int(unbounded)).Info(); !info.Running {
		t.Errorf("the process without a timeout: %+v", info)
	}
	for v, want := range map[string]time.Duration{"250": 250 * time.Millisecond, "0": 0, "-1": 0, "x": 0, "99999999999": 0} {
		if got, _ := connectTimeout(http.Header{"Connect-Timeout-Ms": {v}}); got != want {
			t.Errorf("Connect-Timeout-Ms %q: %v, want %v", v, got, want)
		}
	}
}
