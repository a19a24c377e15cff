package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/audit"
	"github.com/corralhq/corral/internal/cluster"
	"github.com/corralhq/corral/internal/engine"
	"github.com/corralhq/corral/internal/live"
	"github.com/corralhq/corral/internal/metrics"
	"github.com/corralhq/corral/internal/node"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/session"
	"github.com/corralhq/corral/internal/state/memory"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/store/sqlite"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/internal/workspace"
	"github.com/corralhq/corral/sandbox"
)

// TestMain serves as the agent of the fake sandboxes the tests run
// (testenv.FakeEngine): the real agent, as the user running the tests.
func TestMain(m *testing.M) {
	testenv.FakeMain(m)
}

// The tenants of every stack: alpha signs callbacks, beta has no secret.
const (
	keyAlpha = "key-alpha-5a1f0c"
	keyBeta  = "key-beta-77e2d9"
)

// patience bounds every wait for what is bound to happen: long, for a
// loaded machine, and never reached when all is well.
const patience = 30 * time.Second

// world is what the nodes of one test share, as a cluster's nodes do: the
// store (queue, records, owners of sessions and sandboxes, heartbeats) and
// the state (event logs, signals).
type world struct {
	t     *testing.T
	store store.Store
	state *memory.State
}

func newWorld(t *testing.T) *world {
	t.Helper()
	db, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "corral.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	st := memory.New(slog.New(slog.DiscardHandler))
	t.Cleanup(func() { st.Close() })
	return &world{t: t, store: db, state: st}
}

// options are what a test may change of a stack before it is made.
type options struct {
	id   string
	api  Config
	node node.Config
	live live.Config
	// idle: the node claims no work (its dispatcher does not run), so
	// what is submitted stays queued.
	idle bool
	// noSessions, noSandboxes and noStats leave those out of the server.
	noSessions, noSandboxes, noStats bool
	// tiers are the fake runtimes' (default both).
	tiers []runtime.Tier
	blobs http.Handler
	ready []Pinger
	ext   []Extension
	// audit turns the audit trail on (written to the world's store);
	// engine changes the fake engine's configuration.
	audit  bool
	engine func(*engine.Config)
}

// stack is one node of a world serving the API over fake sandboxes: the
// real node, engine, fleet, sessions, live sandboxes and cluster, an
// httptest server in front.
type stack struct {
	t       *testing.T
	w       *world
	url     string
	srv     *Server
	node    *node.Node
	fake    *testenv.Fake
	cluster *cluster.Cluster
	metrics *metrics.Metrics
	logs    *testenv.LogBuffer
}

// newStack is a stack in a world of its own.
func newStack(t *testing.T, opts ...func(*options)) *stack {
	return newWorld(t).stack(opts...)
}

// stack makes and starts a node of w.
func (w *world) stack(opts ...func(*options)) *stack {
	t := w.t
	t.Helper()
	o := options{id: "node-a", node: node.DefaultConfig(), live: live.DefaultConfig(),
		tiers: []runtime.Tier{runtime.TierContainer, runtime.TierGVisor}}
	o.node.MaxConcurrency, o.node.QueueBound = 2, 64
	o.node.PollInterval, o.node.CheckInterval = 20*time.Millisecond, 50*time.Millisecond
	o.node.ReapInterval, o.node.SweepInterval = time.Second, time.Hour
	o.node.WaitMargin = 5 * time.Second
	for _, f := range opts {
		f(&o)
	}
	s := &stack{t: t, w: w, logs: &testenv.LogBuffer{}, metrics: metrics.New()}
	log := slog.New(slog.NewTextHandler(s.logs, &slog.HandlerOptions{Level: slog.LevelWarn})).With("node", o.id)
	// No language caches: warming one would make sandboxes of its own.
	s.fake = testenv.FakeEngineOf(t, o.tiers, func(c *engine.Config) {
		c.CacheDir = ""
		if o.engine != nil {
			o.engine(c)
		}
	})
	hs := httptest.NewUnstartedServer(nil)
	s.url = "http://" + hs.Listener.Addr().String()
	s.cluster = cluster.New(cluster.Config{ID: o.id, Address: hs.Listener.Addr().String(),
		Heartbeat: time.Second, LostAfter: time.Minute}, w.store, log)
	if err := s.cluster.Beat(t.Context()); err != nil {
		t.Fatal(err)
	}
	table, err := workspace.Open(t.Context(), workspace.Config{Dir: t.TempDir(), ReapInterval: time.Minute}, s.cluster, log)
	if err != nil {
		t.Fatal(err)
	}
	d := Deps{Auth: testAuth(t), Metrics: s.metrics, Log: log, Ready: o.ready, Cluster: s.cluster, Blobs: o.blobs}
	if o.audit {
		aw := audit.NewWriter(w.store, audit.WriterConfig{Node: o.id, Flush: 10 * time.Millisecond}, nil, s.metrics.AuditEvents, log)
		t.Cleanup(func() { aw.Close(context.Background()) })
		d.Audit, d.AuditLog = aw, w.store
	}
	if !o.noSessions {
		d.Sessions = session.New(session.DefaultConfig(), table, s.fake.Engine, s.fake.Fleet, log)
		t.Cleanup(d.Sessions.Close)
	}
	if !o.noSandboxes {
		d.Sandboxes = live.New(o.live, live.Deps{Table: table, Engine: s.fake.Engine, Fleet: s.fake.Fleet, Publisher: s.cluster, Log: log})
		t.Cleanup(d.Sandboxes.Close)
	}
	if !o.noStats {
		d.Stats = w.store
	}
	s.node = node.New(o.node, node.Deps{Engine: s.fake.Engine, Fleet: s.fake.Fleet, Store: w.store, State: w.state,
		Cluster: s.cluster, Metrics: s.metrics, Log: log, Sessions: d.Sessions, Audit: d.Audit})
	d.Node = s.node
	s.srv = New(o.api, d)
	hs.Config.Handler = s.srv.Handler(o.ext...)
	hs.Start()
	t.Cleanup(hs.Close)
	if !o.idle {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			if err := s.node.Run(ctx); err != nil {
				t.Errorf("node %s: %v", o.id, err)
			}
		}()
		t.Cleanup(func() { cancel(); <-done })
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("node %s logged:\n%s", o.id, s.logs)
		}
	})
	return s
}

func testAuth(t *testing.T) *Auth {
	t.Helper()
	a, err := NewAuth([]Tenant{
		{Name: "alpha", KeyHashes: []string{HashKey(keyAlpha)}, CallbackSecret: []byte("alpha-secret")},
		{Name: "beta", KeyHashes: []string{"sha256:" + HashKey(keyBeta)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// reply is an answer, its body read.
type reply struct {
	status int
	header http.Header
	body   []byte
}

// do makes a call with key ("" sends no Authorization) and body ("" sends
// none); hdr are more header name, value pairs.
func (s *stack) do(key, method, path, body string, hdr ...string) reply {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.t.Context(), patience)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.url+path, rd)
	if err != nil {
		s.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := noRedirect.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		s.t.Fatalf("%s %s: read the answer: %v", method, path, err)
	}
	return reply{status: res.StatusCode, header: res.Header, body: b}
}

// noRedirect shows redirects as they are answered.
var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// call makes a call that must answer status, and decodes its JSON body
// into out (if not nil).
func (s *stack) call(key, method, path, body string, status int, out any, hdr ...string) reply {
	s.t.Helper()
	r := s.do(key, method, path, body, hdr...)
	if r.status != status {
		s.t.Fatalf("%s %s: %d %s; want %d", method, path, r.status, r.body, status)
	}
	if out != nil {
		if err := json.Unmarshal(r.body, out); err != nil {
			s.t.Fatalf("%s %s: %v in %s", method, path, err, r.body)
		}
	}
	return r
}

// wireError is an error's body as the wire has it.
type wireError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field"`
	Written *int64 `json:"written"`
}

// fail makes a call that must fail with status and code, and checks the
// shape every error has: JSON, {"error": {"code", "message", "field"?}}
// and nothing else, a message; 401s name the scheme.
func (s *stack) fail(key, method, path, body string, status int, code string, hdr ...string) (wireError, reply) {
	s.t.Helper()
	r := s.do(key, method, path, body, hdr...)
	return checkError(s.t, method+" "+path, r, status, code), r
}

func checkError(t *testing.T, what string, r reply, status int, code string) wireError {
	t.Helper()
	var e struct {
		Error *wireError `json:"error"`
	}
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil || e.Error == nil {
		t.Fatalf("%s: %d %q is not an error body (%v)", what, r.status, r.body, err)
	}
	if r.status != status || e.Error.Code != code {
		t.Fatalf("%s: %d %s; want %d %s", what, r.status, r.body, status, code)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s: Content-Type %q", what, ct)
	}
	if e.Error.Message == "" {
		t.Errorf("%s: no message in %s", what, r.body)
	}
	if status == http.StatusUnauthorized && r.header.Get("WWW-Authenticate") == "" {
		t.Errorf("%s: 401 without WWW-Authenticate", what)
	}
	return *e.Error
}

// retryAfter is a reply's Retry-After in seconds, 0 without one.
func (r reply) retryAfter() int {
	n, _ := strconv.Atoi(r.header.Get("Retry-After"))
	return n
}

// event is one Server-Sent Event.
type event struct {
	id   uint64
	typ  string
	data string
}

// events reads the Server-Sent Events of body; comments are skipped.
func events(t *testing.T, body []byte) []event {
	t.Helper()
	var out []event
	var cur event
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.typ != "" || cur.data != "" {
				out = append(out, cur)
			}
			cur = event{}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "id: "):
			n, err := strconv.ParseUint(strings.TrimPrefix(line, "id: "), 10, 64)
			if err != nil {
				t.Fatalf("event id %q", line)
			}
			cur.id = n
		case strings.HasPrefix(line, "event: "):
			cur.typ = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.data = strings.TrimPrefix(line, "data: ")
		default:
			t.Fatalf("not an event stream line: %q", line)
		}
	}
	return out
}

// submit submits req for key's tenant and returns the accepted id.
func (s *stack) submit(key string, req sandbox.ExecuteRequest) string {
	s.t.Helper()
	var sub submitted
	s.call(key, "POST", "/v1/executions", jsonOf(s.t, req), http.StatusAccepted, &sub)
	if sub.ExecutionID == "" || sub.Status != sandbox.StatusQueued {
		s.t.Fatalf("submitted %+v", sub)
	}
	return sub.ExecutionID
}

// final waits for execution id's final record.
func (s *stack) final(key, id string) sandbox.Result {
	s.t.Helper()
	var res sandbox.Result
	if !testenv.Eventually(s.t, patience, func() bool {
		s.call(key, "GET", "/v1/executions/"+id, "", http.StatusOK, &res)
		return res.Status.Final()
	}) {
		s.t.Fatalf("%s still %s after %s", id, res.Status, patience)
	}
	return res
}

// joined is what name gives of each of xs, comma-separated.
func joined[T any](xs []T, name func(T) string) string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = name(x)
	}
	return strings.Join(out, ",")
}

// until waits for cond, or fails the test naming what.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if !testenv.Eventually(t, patience, cond) {
		t.Fatalf("timed out waiting: %s", what)
	}
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
