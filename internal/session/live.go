package session

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/corralhq/corral/internal/engine"
	"github.com/corralhq/corral/internal/fleet"
	"github.com/corralhq/corral/internal/images"
	"github.com/corralhq/corral/internal/kernel"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/sandbox"
)

// A live sandbox is a session made with Create: its sandbox starts at once
// and is held for the session's whole life, never evicted nor reset.
// Processes started in it (process.go) run on between calls; executions
// of the session run in it as one more process; its timeout is fixed at
// creation and moved only by SetTimeout (it does not slide with use). If
// the sandbox dies, the next use makes it again on the same disk: the
// files are kept, the processes are lost (Restarts counts it).

// More errors.
var (
	// ErrExists: a session with the id asked for exists already.
	ErrExists = errors.New("sandbox exists")
	// ErrTooMany: the sandbox runs as many processes as it may.
	ErrTooMany = errors.New("too many processes")
	// ErrEnded: the process has ended (no stdin, no signal).
	ErrEnded = errors.New("process ended")
	// ErrUnsupported: a feature this server does not have (answered
	// 501).
	ErrUnsupported = errors.New("not supported by this server")
	// ErrNoStdin: the process was started without stdin.
	ErrNoStdin = errors.New("process has no stdin")
	// ErrNoTerminal: the process was started without a PTY.
	ErrNoTerminal = errors.New("process has no terminal")
	// ErrNoProcess: no such process in the sandbox (it matches
	// ErrNotFound too).
	ErrNoProcess = fmt.Errorf("%w: no such process", ErrNotFound)
)

// Metadata bounds.
const (
	maxMetadataPairs = 32
	maxMetadataBytes = 4 << 10
)

// LiveSpec is how a live sandbox is made, saved with its session.
type LiveSpec struct {
	// Request is the creation request, defaults filled in.
	Request sandbox.CreateSandboxRequest `json:"request"`
	// Tier and Image are where the request was routed when it was made.
	Tier  string `json:"tier"`
	Image string `json:"image"`
	// Restarts counts the sandboxes made again after one died.
	Restarts int64 `json:"restarts"`
	// Paused is set while the sandbox is paused (pause.go).
	Paused *sandbox.SandboxPause `json:"paused,omitempty"`
}

// liveState is a live sandbox's running part. mu is held while the
// sandbox is made or torn down, and guards every field.
type liveState struct {
	mu   sync.Mutex
	sb   runtime.Sandbox
	env  map[string]string // what every process starts with
	img  images.Image      // what the sandbox runs
	stop func()            // ends the egress proxy
	// kernels holds the sandbox's code contexts (contexts.go).
	kernels *kernel.Kernels
	procs   map[int]*process // by pid, ended ones included
	// ended lists the pids of ended processes, oldest first.
	ended []int
	// lost: the sandbox was lost with this node's last run; making it
	// again counts as a restart.
	lost bool
	// moving are the processes of a sandbox paused with its memory, which
	// the resume takes up again; pauseLost counts those that ended with a
	// pause of its files only (pause.go).
	moving    []*process
	pauseLost int
}

// NewSandboxID returns a fresh sandbox id: "sbx_", a millisecond
// timestamp and random bits.
func NewSandboxID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("sbx_%011x%s", time.Now().UnixMilli(), hex.EncodeToString(b[:]))
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// checkMetadata bounds a sandbox's labels.
func checkMetadata(md map[string]string) error {
	if len(md) > maxMetadataPairs {
		return invalid("metadata has %d pairs; the limit is %d", len(md), maxMetadataPairs)
	}
	total := 0
	for k, v := range md {
		if k == "" || len(k) > 128 || !utf8.ValidString(k) || !utf8.ValidString(v) {
			return invalid("metadata keys are 1-128 bytes of UTF-8, values UTF-8")
		}
		total += len(k) + len(v)
	}
	if total > maxMetadataBytes {
		return invalid("metadata holds %d bytes; the limit is %d", total, maxMetadataBytes)
	}
	return nil
}

// inputField renames the engine's fields to the sandbox request's own.
func inputField(err error) error {
	var ie *engine.InputError
	if !errors.As(err, &ie) {
		return err
	}
	out := *ie
	switch ie.Field {
	case "limits.cpu_cores":
		out.Field = "limits.cpus"
	case "isolation":
		out.Field = "tier"
	}
	return &out
}

// prepare validates req, fills its defaults and routes it: the engine's
// job for its sandbox.
func (m *Manager) prepare(req *sandbox.CreateSandboxRequest) (*engine.Job, error) {
	if req.Language == "" {
		req.Language = "bash"
	}
	if req.Limits.Pids == 0 {
		req.Limits.Pids = m.engine.Config().Pids
	}
	if req.Limits.Pids < 16 || req.Limits.Pids > m.cfg.MaxPids {
		return nil, &engine.InputError{Field: "limits.pids", Message: fmt.Sprintf("must be between 16 and %d", m.cfg.MaxPids)}
	}
	if req.Limits.DiskMB == 0 {
		req.Limits.DiskMB = m.cfg.DefaultDiskMB
	}
	if req.Limits.DiskMB < 16 || req.Limits.DiskMB > m.cfg.MaxDiskMB {
		return nil, &engine.InputError{Field: "limits.disk_mb", Message: fmt.Sprintf("must be between 16 and %d", m.cfg.MaxDiskMB)}
	}
	job, err := m.engine.Prepare(sandbox.ExecuteRequest{Language: req.Language, Image: req.Image,
		Limits:  sandbox.Limits{MemoryMB: req.Limits.MemoryMB, CPUCores: req.Limits.CPUs},
		Env:     req.Env,
		Network: req.Network, Isolation: req.Tier})
	if err != nil {
		return nil, inputField(err)
	}
	// The tier it was routed to, not "auto": a sandbox made again is
	// made on the same tier.
	req.Language, req.Tier = job.Req.Language, sandbox.Isolation(job.Tier)
	req.Limits.MemoryMB, req.Limits.CPUs = job.Req.Limits.MemoryMB, job.Req.Limits.CPUCores
	return job, nil
}

// Create makes a live sandbox of tenant and starts its sandbox.
func (m *Manager) Create(ctx context.Context, tenant string, req sandbox.CreateSandboxRequest) (sandbox.SandboxInfo, error) {
	if req.SandboxID == "" {
		req.SandboxID = NewSandboxID()
	} else if !engine.ValidID(req.SandboxID) {
		return sandbox.SandboxInfo{}, &engine.InputError{Field: "sandbox_id",
			Message: "must be 1-128 characters of letters, digits and . _ : - starting with a letter or digit"}
	}
	timeout := time.Duration(req.TimeoutSeconds) * time.Second
	if timeout == 0 {
		timeout = m.cfg.DefaultTimeout
	}
	if timeout <= 0 || timeout > m.cfg.MaxTTL {
		return sandbox.SandboxInfo{}, &engine.InputError{Field: "timeout_seconds",
			Message: fmt.Sprintf("must be between 1 and %d", int(m.cfg.MaxTTL.Seconds()))}
	}
	req.TimeoutSeconds = int64(timeout.Seconds())
	if err := checkMetadata(req.Metadata); err != nil {
		return sandbox.SandboxInfo{}, err
	}
	job, err := m.prepare(&req)
	if err != nil {
		return sandbox.SandboxInfo{}, err
	}
	id := req.SandboxID
	if err := m.removeExpired(ctx, tenant, id); err != nil {
		return sandbox.SandboxInfo{}, err
	}
	m.mu.Lock()
	old, ok := m.sessions[key(tenant, id)]
	exists := ok && !old.gone
	m.mu.Unlock()
	if exists {
		return sandbox.SandboxInfo{}, ErrExists
	}
	mine, err := m.registry.HoldSession(ctx, tenant, id)
	if err != nil {
		return sandbox.SandboxInfo{}, err
	}
	if !mine {
		return sandbox.SandboxInfo{}, ErrExists
	}
	now := m.now().UTC()
	e := m.newEntry(Info{ID: id, Tenant: tenant, DiskMB: req.Limits.DiskMB, TTLSeconds: req.TimeoutSeconds,
		CreatedAt: now, LastUsedAt: now, ExpiresAt: now.Add(timeout)})
	e.spec = &LiveSpec{Request: req, Tier: string(job.Tier), Image: job.Image.Name}
	e.live = newLiveState()
	m.mu.Lock()
	if o, ok := m.sessions[e.key]; ok && !o.gone {
		m.mu.Unlock()
		return sandbox.SandboxInfo{}, ErrExists
	}
	m.sessions[e.key] = e
	err = m.saveLocked(e)
	m.mu.Unlock()
	if err == nil {
		_, err = m.held(ctx, e)
	}
	if err != nil {
		// Nothing of it may stay: not its files, nor its hold.
		if rerr := m.remove(e); rerr != nil {
			m.log.Warn("remove a sandbox that could not start", "session", e.key, "err", rerr)
		}
		return sandbox.SandboxInfo{}, err
	}
	m.log.Info("sandbox created", "session", e.key, "tier", job.Tier, "image", job.Image.Name)
	info := m.describe(e)
	m.publish(ctx, e, info)
	return info, nil
}

func newLiveState() *liveState { return &liveState{procs: map[int]*process{}} }

// held returns a live sandbox's sandbox, making it (again, on the same
// disk) if it has none or the one it had died.
func (m *Manager) held(ctx context.Context, e *entry) (runtime.Sandbox, error) {
	ls := e.live
	ls.mu.Lock()
	defer ls.mu.Unlock()
	m.mu.Lock()
	gone := e.gone
	m.mu.Unlock()
	if gone {
		return nil, ErrNotFound
	}
	m.mu.Lock()
	paused := e.spec.Paused != nil
	m.mu.Unlock()
	if paused {
		return nil, ErrPaused
	}
	if ls.sb != nil {
		select {
		case <-ls.sb.Agent().Done():
		default:
			return ls.sb, nil
		}
		m.log.Warn("a live sandbox died; making it again on its disk", "session", e.key, "sandbox", ls.sb.ID())
		m.dropLocked(ls)
		m.mu.Lock()
		e.spec.Restarts++
		if err := m.saveLocked(e); err != nil {
			m.log.Warn("save session", "session", e.key, "err", err)
		}
		m.mu.Unlock()
	}
	m.mu.Lock()
	if ls.lost {
		ls.lost = false
		e.spec.Restarts++
	}
	m.mu.Unlock()
	return m.startLocked(ctx, e, "")
}

// startLocked makes a live sandbox's sandbox on its disk (ls.mu is held):
// restored from the saved state in dir when dir is set, else a new one.
func (m *Manager) startLocked(ctx context.Context, e *entry, restore string) (runtime.Sandbox, error) {
	ls := e.live
	m.mu.Lock()
	req := e.spec.Request
	m.mu.Unlock()
	job, err := m.prepare(&req)
	if err != nil {
		return nil, fmt.Errorf("make sandbox %s again: %w", e.key, err)
	}
	spec, err := m.engine.Spec(ctx, job)
	if err != nil {
		return nil, err
	}
	spec.Workspace = filepath.Join(e.dir, "disk.img")
	spec.Limits.DiskBytes = req.Limits.DiskMB << 20
	spec.Limits.Pids = req.Limits.Pids
	var sb runtime.Sandbox
	if restore != "" {
		sb, err = m.fleet.Restore(ctx, job.Tier, spec, job.Image, restore, fleet.HolderSession)
	} else {
		sb, err = m.makeSandbox(ctx, e, job, spec)
	}
	if err != nil {
		return nil, err
	}
	env := m.engine.Env(job.Image)
	maps.Copy(env, req.Env)
	stop := func() {}
	if len(job.Egress) > 0 {
		if stop, err = m.engine.SandboxEgress(ctx, job.Egress, sb); err != nil {
			m.destroy(sb)
			return nil, err
		}
		maps.Copy(env, engine.ProxyEnv())
	}
	ls.sb, ls.env, ls.stop, ls.img = sb, env, stop, job.Image
	if restore == "" || ls.kernels == nil {
		// A restored sandbox's contexts go on (Resume reattaches them).
		ls.kernels = kernel.New(sb.Agent(), kernel.Options{Env: sortedEnv(env)})
	}
	return sb, nil
}

// Taker hands over warm sandboxes for good (pool.Pool).
type Taker interface {
	Take(ctx context.Context, c fleet.Claim) (runtime.Sandbox, *fleet.Zygote, bool)
}

// SetPool makes live sandboxes take their first sandbox from p when one
// there matches.
func (m *Manager) SetPool(p Taker) { m.pool = p }

// makeSandbox makes a live sandbox's sandbox on its disk: the first one
// from the warm pool when one matches and its disk can be kept as the
// sandbox's own, else a new one.
func (m *Manager) makeSandbox(ctx context.Context, e *entry, job *engine.Job, spec runtime.Spec) (runtime.Sandbox, error) {
	if _, err := os.Stat(spec.Workspace); m.pool != nil && errors.Is(err, os.ErrNotExist) {
		sb, _, ok := m.pool.Take(ctx, fleet.Claim{Tier: job.Tier, Spec: spec, Tenant: e.info.Tenant, Image: job.Image})
		if ok {
			k, can := sb.(runtime.DiskKeeper)
			if can {
				err = k.KeepDisk(spec.Workspace)
			}
			if can && err == nil {
				m.fleet.Hold(sb, fleet.HolderSession, time.Time{})
				return sb, nil
			}
			if err != nil {
				m.log.Warn("keep a warm sandbox's disk", "session", e.key, "sandbox", sb.ID(), "err", err)
			}
			m.destroy(sb)
		}
	}
	return m.fleet.Create(ctx, job.Tier, spec, job.Image, fleet.HolderSession)
}

// dropLocked tears down a live sandbox's sandbox (ls.mu is held): its
// code contexts are closed, its processes end as their agent goes.
func (m *Manager) dropLocked(ls *liveState) {
	// Processes saved with a paused sandbox end with it.
	settle(ls.moving, nil, true)
	ls.moving = nil
	m.closeKernelsLocked(ls)
	if ls.stop != nil {
		ls.stop()
	}
	if ls.sb != nil {
		m.destroy(ls.sb)
	}
	ls.sb, ls.stop, ls.env = nil, nil, nil
}

// describe is a live sandbox's answer.
func (m *Manager) describe(e *entry) sandbox.SandboxInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.describeLocked(e)
}

func (m *Manager) describeLocked(e *entry) sandbox.SandboxInfo {
	r := e.spec.Request
	info := sandbox.SandboxInfo{SandboxID: e.info.ID, Language: r.Language, Image: e.spec.Image, Tier: e.spec.Tier,
		Limits: r.Limits, Network: r.Network, Metadata: r.Metadata, State: "running",
		TimeoutSeconds: e.info.TTLSeconds, CreatedAt: e.info.CreatedAt, ExpiresAt: e.info.ExpiresAt,
		Executions: e.info.Executions, Restarts: e.spec.Restarts}
	if p := e.spec.Paused; p != nil {
		pause := *p
		info.State, info.Pause = "paused", &pause
	}
	return info
}

// publish records a live sandbox's description in the registry, for every
// node's listing. A failure is logged: the sandbox itself is fine, and
// its next change publishes again.
func (m *Manager) publish(ctx context.Context, e *entry, info sandbox.SandboxInfo) {
	b, err := json.Marshal(info)
	if err == nil {
		err = m.registry.PublishSession(ctx, e.info.Tenant, e.info.ID, b)
	}
	if err != nil {
		m.log.Warn("publish a sandbox's description", "session", e.key, "err", err)
	}
}

// liveEntry returns tenant's live sandbox id, unless it expired.
func (m *Manager) liveEntry(tenant, id string) (*entry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.sessions[key(tenant, id)]
	if !ok || e.gone || e.live == nil || m.now().After(e.info.ExpiresAt) {
		return nil, ErrNotFound
	}
	return e, nil
}

// Sandbox describes tenant's live sandbox id.
func (m *Manager) Sandbox(tenant, id string) (sandbox.SandboxInfo, error) {
	e, err := m.liveEntry(tenant, id)
	if err != nil {
		return sandbox.SandboxInfo{}, err
	}
	return m.describe(e), nil
}

// SetTimeout makes a live sandbox end timeout from now.
func (m *Manager) SetTimeout(ctx context.Context, tenant, id string, timeout time.Duration) (sandbox.SandboxInfo, error) {
	if timeout <= 0 || timeout > m.cfg.MaxTTL {
		return sandbox.SandboxInfo{}, &engine.InputError{Field: "timeout_seconds",
			Message: fmt.Sprintf("must be between 1 and %d", int(m.cfg.MaxTTL.Seconds()))}
	}
	e, err := m.liveEntry(tenant, id)
	if err != nil {
		return sandbox.SandboxInfo{}, err
	}
	m.mu.Lock()
	if e.spec.Paused != nil {
		// Its clock is stopped; the resume sets it going again.
		m.mu.Unlock()
		return sandbox.SandboxInfo{}, ErrPaused
	}
	now := m.now().UTC()
	e.info.TTLSeconds = int64(timeout.Seconds())
	e.info.LastUsedAt = now
	e.info.ExpiresAt = now.Add(timeout)
	err = m.saveLocked(e)
	info := m.describeLocked(e)
	m.mu.Unlock()
	if err != nil {
		return sandbox.SandboxInfo{}, err
	}
	m.publish(ctx, e, info)
	return info, nil
}

// acquireLive lends a live sandbox's held sandbox to one execution (e's
// lock is held until its release): it runs beside the sandbox's processes
// under the sandbox's limits and network, and its end hands nothing back.
func (m *Manager) acquireLive(ctx context.Context, e *entry) (*fleet.Lease, error) {
	sb, err := m.held(ctx, e)
	if err != nil {
		<-e.lock
		return nil, err
	}
	e.live.mu.Lock()
	env := maps.Clone(e.live.env)
	img := e.live.img
	e.live.mu.Unlock()
	m.mu.Lock()
	tier := runtime.Tier(e.spec.Tier)
	m.mu.Unlock()
	l := fleet.NewLease(sb, true, nil, func(bool) {
		// Held for the sandbox's life, not the execution's.
		m.fleet.Hold(sb, fleet.HolderSession, time.Time{})
		m.mu.Lock()
		e.info.Executions++
		e.info.LastUsedAt = m.now().UTC()
		if err := m.saveLocked(e); err != nil {
			m.log.Warn("save session", "session", e.key, "err", err)
		}
		m.mu.Unlock()
		<-e.lock
	})
	l.Live, l.Env, l.Tier, l.Image = true, env, tier, img
	return l, nil
}
