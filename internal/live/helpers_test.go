package live

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/cluster"
	"github.com/corralhq/corral/internal/engine"
	"github.com/corralhq/corral/internal/kernel"
	"github.com/corralhq/corral/internal/session"
	"github.com/corralhq/corral/internal/store/sqlite"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/internal/workspace"
	"github.com/corralhq/corral/sandbox"
)

// TestMain serves as the agent of the fake sandboxes the unit tests use
// (testenv.FakeEngine); *_sandbox_test.go runs real ones as root.
func TestMain(m *testing.M) {
	testenv.FakeMain(m)
}

func key(tenant, id string) string { return tenant + "/" + id }

// registry is a cluster of one node on a SQLite store of t's own.
func registry(t *testing.T) *cluster.Cluster {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "corral.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return cluster.New(cluster.Config{ID: "node", Address: "127.0.0.1:1", Heartbeat: time.Second, LostAfter: time.Minute},
		st, slog.New(slog.DiscardHandler))
}

// unit is a node's live sandboxes and sessions over fake sandboxes (no
// root) with a clock of its own.
type unit struct {
	t        *testing.T
	m        *byID
	live     *Manager
	sessions *session.Manager
	table    *workspace.Table
	f        *testenv.Fake
	reg      *testenv.Owners
	clock    *testenv.Clock
	logs     *testenv.LogBuffer
	dir      string
	cfg      Config
}

func newUnit(t *testing.T, mutate ...func(*Config)) *unit {
	t.Helper()
	// No language caches: warming one would make sandboxes of its own.
	f := testenv.FakeEngine(t, func(c *engine.Config) { c.CacheDir = "" })
	cfg := DefaultConfig()
	for _, m := range mutate {
		m(&cfg)
	}
	u := &unit{t: t, f: f, reg: testenv.NewOwners(), clock: testenv.NewClock(), logs: &testenv.LogBuffer{}, dir: t.TempDir(), cfg: cfg}
	u.open()
	return u
}

// open makes the table and the managers on the unit's directory, as a
// node's start does.
func (u *unit) open() {
	u.t.Helper()
	log := slog.New(slog.NewTextHandler(u.logs, nil))
	table, err := workspace.Open(u.t.Context(), workspace.Config{Dir: u.dir, ReapInterval: 30 * time.Second}, u.reg, log)
	if err != nil {
		u.t.Fatal(err)
	}
	table.Now = u.clock.Now
	u.table = table
	u.live = New(u.cfg, Deps{Table: table, Engine: u.f.Engine, Fleet: u.f.Fleet, Publisher: u.reg, Log: log})
	u.sessions = session.New(session.DefaultConfig(), table, u.f.Engine, u.f.Fleet, log)
	u.m = &byID{Manager: u.live, sessions: u.sessions}
	u.t.Cleanup(u.close) // before the engine's and the fleet's
}

// close stops the node's managers, as a node's stop does.
func (u *unit) close() {
	u.live.Close()
	u.sessions.Close()
}

// restart stops the node and starts it again on the same directory.
func (u *unit) restart() {
	u.close()
	u.open()
}

// sessionDir is where sandbox (t, id) keeps its files.
func (u *unit) sessionDir(id string) string { return filepath.Join(u.dir, "t", id) }

// handle is live sandbox (t, id)'s handle, expired or not.
func (u *unit) handle(id string) *Sandbox {
	u.t.Helper()
	w, ok := u.table.Lookup("t", id)
	if !ok {
		u.t.Fatalf("no sandbox %s", id)
	}
	s, ok := u.table.State(w).Occupant.(*Sandbox)
	if !ok {
		u.t.Fatalf("%s is no live sandbox", id)
	}
	return s
}

// byID makes the calls the API makes, by tenant and id, on the handles.
type byID struct {
	*Manager
	sessions *session.Manager
}

func (b *byID) Create(ctx context.Context, tenant string, req sandbox.CreateSandboxRequest) (sandbox.Info, error) {
	_, info, err := b.Manager.Create(ctx, tenant, req)
	return info, err
}

func (b *byID) Sandbox(tenant, id string) (sandbox.Info, error) {
	s, err := b.Get(tenant, id)
	if err != nil {
		return sandbox.Info{}, err
	}
	return s.Info(), nil
}

func (b *byID) Sandboxes(tenant string) []sandbox.Info { return b.List(tenant) }

func (b *byID) Delete(ctx context.Context, tenant, id string) error { return b.Kill(ctx, tenant, id) }

func (b *byID) Touch(ctx context.Context, tenant, id string, o session.Options) (session.Info, bool, error) {
	return b.sessions.Touch(ctx, tenant, id, o)
}

func (b *byID) Acquirer(tenant, id string) session.Acquirer { return b.sessions.Acquirer(tenant, id) }

func (b *byID) SetTimeout(ctx context.Context, tenant, id string, d time.Duration) (sandbox.Info, error) {
	s, err := b.Get(tenant, id)
	if err != nil {
		return sandbox.Info{}, err
	}
	return s.SetTimeout(ctx, d)
}

func (b *byID) Pause(ctx context.Context, tenant, id string) error {
	s, err := b.Get(tenant, id)
	if err != nil {
		return err
	}
	return s.Pause(ctx)
}

func (b *byID) Resume(ctx context.Context, tenant, id string) (sandbox.Info, error) {
	s, err := b.Get(tenant, id)
	if err != nil {
		return sandbox.Info{}, err
	}
	return s.Resume(ctx)
}

func (b *byID) AccessToken(tenant, id string) (string, error) {
	s, err := b.Get(tenant, id)
	if err != nil {
		return "", err
	}
	return s.AccessToken()
}

func (b *byID) SetAccessToken(tenant, id, token string) error {
	s, err := b.Get(tenant, id)
	if err != nil {
		return err
	}
	return s.SetAccessToken(token)
}

func (b *byID) StartProcess(ctx context.Context, tenant, id string, req sandbox.StartProcessRequest) (sandbox.ProcessInfo, error) {
	s, err := b.Get(tenant, id)
	if err != nil {
		return sandbox.ProcessInfo{}, err
	}
	p, err := s.Start(ctx, req)
	if err != nil {
		return sandbox.ProcessInfo{}, err
	}
	return p.Info(), nil
}

func (b *byID) Processes(tenant, id string) ([]sandbox.ProcessInfo, error) {
	s, err := b.Get(tenant, id)
	if err != nil {
		return nil, err
	}
	ps, err := s.Processes()
	if err != nil {
		return nil, err
	}
	out := make([]sandbox.ProcessInfo, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.Info())
	}
	return out, nil
}

func (b *byID) proc(tenant, id string, pid int) (*Process, error) {
	s, err := b.Get(tenant, id)
	if err != nil {
		return nil, err
	}
	return s.Process(pid)
}

func (b *byID) Process(ctx context.Context, tenant, id string, pid int, wait bool) (sandbox.ProcessInfo, error) {
	p, err := b.proc(tenant, id, pid)
	if err != nil {
		return sandbox.ProcessInfo{}, err
	}
	if wait {
		return p.Wait(ctx)
	}
	return p.Info(), nil
}

func (b *byID) ProcessOutput(tenant, id string, pid int) (*Process, error) {
	return b.proc(tenant, id, pid)
}

func (b *byID) WriteStdin(ctx context.Context, tenant, id string, pid int, r io.Reader) (int64, error) {
	p, err := b.proc(tenant, id, pid)
	if err != nil {
		return 0, err
	}
	return p.WriteStdin(ctx, r)
}

func (b *byID) CloseStdin(tenant, id string, pid int) error {
	p, err := b.proc(tenant, id, pid)
	if err != nil {
		return err
	}
	return p.CloseStdin()
}

func (b *byID) Signal(ctx context.Context, tenant, id string, pid int, sig syscall.Signal) error {
	p, err := b.proc(tenant, id, pid)
	if err != nil {
		return err
	}
	return p.Signal(ctx, sig)
}

func (b *byID) Resize(ctx context.Context, tenant, id string, pid int, size sandbox.PTYSize) error {
	p, err := b.proc(tenant, id, pid)
	if err != nil {
		return err
	}
	return p.Resize(ctx, size)
}

func (b *byID) ReadFile(ctx context.Context, tenant, id, file string, w io.Writer) error {
	s, err := b.Get(tenant, id)
	if err != nil {
		return err
	}
	return s.ReadFile(ctx, file, w)
}

func (b *byID) WriteFile(ctx context.Context, tenant, id, file string, r io.Reader) (sandbox.SandboxFile, error) {
	s, err := b.Get(tenant, id)
	if err != nil {
		return sandbox.SandboxFile{}, err
	}
	return s.WriteFile(ctx, file, r)
}

func (b *byID) RemoveFile(ctx context.Context, tenant, id, file string) error {
	s, err := b.Get(tenant, id)
	if err != nil {
		return err
	}
	return s.RemoveFile(ctx, file)
}

func (b *byID) StatFile(ctx context.Context, tenant, id, file string) (sandbox.SandboxFile, error) {
	s, err := b.Get(tenant, id)
	if err != nil {
		return sandbox.SandboxFile{}, err
	}
	return s.StatFile(ctx, file)
}

func (b *byID) ListFiles(ctx context.Context, tenant, id, dir string, depth int) ([]sandbox.SandboxFile, error) {
	s, err := b.Get(tenant, id)
	if err != nil {
		return nil, err
	}
	return s.ListFiles(ctx, dir, depth)
}

func (b *byID) MakeDir(ctx context.Context, tenant, id, dir string, parents bool) (sandbox.SandboxFile, error) {
	s, err := b.Get(tenant, id)
	if err != nil {
		return sandbox.SandboxFile{}, err
	}
	return s.MakeDir(ctx, dir, parents)
}

func (b *byID) Move(ctx context.Context, tenant, id, from, to string) (sandbox.SandboxFile, error) {
	s, err := b.Get(tenant, id)
	if err != nil {
		return sandbox.SandboxFile{}, err
	}
	return s.Move(ctx, from, to)
}

func (b *byID) Watch(ctx context.Context, tenant, id, dir string, recursive bool, fn func(sandbox.FileEvent)) (func() error, error) {
	s, err := b.Get(tenant, id)
	if err != nil {
		return nil, err
	}
	return s.Watch(ctx, dir, recursive, fn)
}

func (b *byID) contexts(ctx context.Context, tenant, id string) (*kernel.Contexts, error) {
	s, err := b.Get(tenant, id)
	if err != nil {
		return nil, err
	}
	return s.Contexts(ctx)
}

func (b *byID) CreateContext(ctx context.Context, tenant, id string, o kernel.ContextOptions) (sandbox.CodeContext, error) {
	k, err := b.contexts(ctx, tenant, id)
	if err != nil {
		return sandbox.CodeContext{}, err
	}
	return k.Create(ctx, o)
}

func (b *byID) Contexts(ctx context.Context, tenant, id string) ([]sandbox.CodeContext, error) {
	k, err := b.contexts(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	return k.List(), nil
}

func (b *byID) RunContext(ctx context.Context, tenant, id, cid, code string, timeout time.Duration, emit func(sandbox.ContextEvent)) error {
	k, err := b.contexts(ctx, tenant, id)
	if err != nil {
		return err
	}
	return k.Run(ctx, cid, code, timeout, emit)
}

func (b *byID) DeleteContext(ctx context.Context, tenant, id, cid string) error {
	k, err := b.contexts(ctx, tenant, id)
	if err != nil {
		return err
	}
	return k.Delete(ctx, cid)
}

func (b *byID) RestartContext(ctx context.Context, tenant, id, cid string) error {
	k, err := b.contexts(ctx, tenant, id)
	if err != nil {
		return err
	}
	return k.Restart(ctx, cid)
}

func (b *byID) ForkContext(ctx context.Context, tenant, id, cid string) (sandbox.CodeContext, error) {
	k, err := b.contexts(ctx, tenant, id)
	if err != nil {
		return sandbox.CodeContext{}, err
	}
	return k.Fork(ctx, cid)
}

func (b *byID) InterruptContext(ctx context.Context, tenant, id, cid string) error {
	k, err := b.contexts(ctx, tenant, id)
	if err != nil {
		return err
	}
	return k.Interrupt(ctx, cid)
}

// onRuntimes is a live Manager on the real runtimes (testenv.Engine) for
// the *_sandbox_test.go tests: its engine, workspace table and log, and
// the Manager alone (lm) and with sessions (m), as the API holds it.
type onRuntimes struct {
	e     *engine.Engine
	table *workspace.Table
	logs  *testenv.LogBuffer
	lm    *Manager
	m     *byID
}

// newOnRuntimes makes an onRuntimes with cfg, closed at the end of t.
func newOnRuntimes(t *testing.T, cfg Config) *onRuntimes {
	t.Helper()
	r := &onRuntimes{e: testenv.Engine(t), logs: &testenv.LogBuffer{}}
	log := slog.New(slog.NewTextHandler(r.logs, nil))
	reg := registry(t)
	var err error
	if r.table, err = workspace.Open(t.Context(), workspace.Config{Dir: t.TempDir(), ReapInterval: time.Minute}, reg, log); err != nil {
		t.Fatal(err)
	}
	r.lm = New(cfg, Deps{Table: r.table, Engine: r.e, Fleet: r.e.Fleet(), Publisher: reg, Log: log})
	t.Cleanup(r.lm.Close)
	r.m = &byID{Manager: r.lm, sessions: session.New(session.DefaultConfig(), r.table, r.e, r.e.Fleet(), log)}
	return r
}
