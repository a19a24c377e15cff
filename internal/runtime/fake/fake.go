// Package fake is a runtime for tests that need sandboxes but not their
// isolation: a sandbox is a directory and Corral's real agent running as an
// ordinary process in local mode (agent.StartLocal), so the engine, the
// pool, sessions and the node run executions through the real agent
// protocol without root, namespaces, cgroups or runc. Nothing is limited:
// limits are recorded, not applied, and programs run as the current user
// on the host. Never use it to run anything untrusted.
package fake

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/corralhq/corral/internal/agent"
	"github.com/corralhq/corral/internal/runtime"
)

// Runtime makes fake sandboxes under a directory. It is safe for
// concurrent use.
type Runtime struct {
	tier  runtime.Tier
	dir   string
	agent string    // the binary started as "agent local ROOT"
	log   io.Writer // the agents' stderr; nil discards it

	hook atomic.Pointer[func(Call) error]

	mu      sync.Mutex
	created int
	live    map[string]*Sandbox
	// pausable: sandboxes are PausableSandboxes (pause.go); paused are
	// the paused ones, by the token in their pause directory.
	pausable bool
	paused   map[string]*Sandbox
}

// Call is an operation of the runtime that a hook (SetHook) sees before
// it happens: Create (Sandbox nil, Spec the sandbox's), or a sandbox's
// Stats, ResetStats, Usage, Update (Limits the new ones) or Destroy.
type Call struct {
	Op      string // "create", "stats", "reset-stats", "usage", "update", "destroy"
	Sandbox *Sandbox
	Spec    runtime.Spec
	Limits  runtime.Limits
}

// SetHook makes h run before every Call of the runtime; an error h
// returns is the operation's, which then does nothing. Tests use it to
// break a sandbox the way a real runtime can, or to hold an operation
// until they let it go. nil removes the hook.
func (r *Runtime) SetHook(h func(Call) error) {
	if h == nil {
		r.hook.Store(nil)
		return
	}
	r.hook.Store(&h)
}

func (r *Runtime) call(c Call) error {
	if h := r.hook.Load(); h != nil {
		return (*h)(c)
	}
	return nil
}

// New returns a runtime of tier whose sandboxes live under dir and whose
// agents are agentBinary started with the arguments "local ROOT" (the
// corral-agent binary, or a test binary whose TestMain calls agent.Main
// for them).
func New(tier runtime.Tier, dir, agentBinary string, log io.Writer) *Runtime {
	return &Runtime{tier: tier, dir: dir, agent: agentBinary, log: log, live: map[string]*Sandbox{}}
}

// Tier implements runtime.Runtime.
func (r *Runtime) Tier() runtime.Tier { return r.tier }

// Created counts the sandboxes made so far.
func (r *Runtime) Created() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.created
}

// Live lists the sandboxes not yet destroyed.
func (r *Runtime) Live() []*Sandbox {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*Sandbox, 0, len(r.live))
	for _, s := range r.live {
		out = append(out, s)
	}
	return out
}

// Create implements runtime.Runtime: a directory with the sandbox's
// writable places, and its agent.
func (r *Runtime) Create(ctx context.Context, spec runtime.Spec) (runtime.Sandbox, error) {
	if err := r.call(Call{Op: "create", Spec: spec}); err != nil {
		return nil, err
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	s := &Sandbox{rt: r, id: "fake-" + hex.EncodeToString(b[:])}
	s.root = filepath.Join(r.dir, s.id)
	if spec.Workspace != "" {
		// A session's workspace outlives its sandboxes: the sandbox's
		// whole directory, next to where the disk image would be.
		s.root, s.keep = spec.Workspace+".fake", true
	}
	s.limits.Store(&spec.Limits)
	s.spec = spec
	dirs := []string{"workspace", "tmp", "dev/shm", runtime.EgressPath}
	if spec.System {
		// A system sandbox's home and users. Its agent runs in plain local
		// mode all the same: its programs run as the test's own user, and
		// of the users only the one that is the test's own may be named.
		dirs = append(dirs, "home/user", "etc")
	}
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(s.root, d), 0o755); err != nil {
			return nil, fmt.Errorf("create fake sandbox: %w", err)
		}
	}
	if spec.System {
		if err := os.WriteFile(filepath.Join(s.root, "etc", "passwd"), []byte(fakePasswd), 0o644); err != nil {
			return nil, fmt.Errorf("create fake sandbox: %w", err)
		}
	}
	r.mu.Lock()
	pausable := r.pausable
	r.mu.Unlock()
	var err error
	if pausable {
		err = s.startLinked(ctx)
	} else {
		s.agent, err = agent.StartLocal(ctx, r.agent, s.root, r.log)
	}
	if err != nil {
		if !s.keep {
			os.RemoveAll(s.root)
		}
		return nil, fmt.Errorf("create fake sandbox: %w", err)
	}
	r.mu.Lock()
	r.created++
	r.live[s.id] = s
	r.mu.Unlock()
	if pausable {
		return PausableSandbox{s}, nil
	}
	return s, nil
}

// Reap implements runtime.Runtime: a fake sandbox dies with its process.
func (r *Runtime) Reap(context.Context) (int, error) { return 0, nil }

// Fixed implements runtime.Fixer as runc does: a sandbox keeps only its
// disk size from its creation, so a warm pool matches claims the way it
// does in production.
func (r *Runtime) Fixed(l runtime.Limits) runtime.Limits {
	return runtime.Limits{DiskBytes: l.DiskBytes}
}

// Sandbox is a fake sandbox.
type Sandbox struct {
	rt    *Runtime
	id    string
	root  string
	agent *agent.Local
	// link and client replace agent in a PausableSandbox (pause.go).
	link   *agent.Link
	client *agent.Client
	spec   runtime.Spec
	paused atomic.Bool // Pause handed the agent on: stop leaves it
	keep   bool        // the root is a session's: it outlives the sandbox
	limits atomic.Pointer[runtime.Limits]
	memory atomic.Int64                  // what MemoryUsage reports (SetMemoryUsage)
	stats  atomic.Pointer[runtime.Stats] // what Stats reports (SetStats); nil: none
	usage  atomic.Pointer[runtime.Usage] // what Usage reports (SetUsage); nil: its files

	destroyOnce sync.Once
	destroyErr  error
}

// ID implements runtime.Sandbox.
func (s *Sandbox) ID() string { return s.id }

// Agent implements runtime.Sandbox.
func (s *Sandbox) Agent() *agent.Client {
	if s.link != nil {
		return s.client
	}
	return s.agent.Client
}

// Limits returns the limits last given (they are not applied).
func (s *Sandbox) Limits() runtime.Limits { return *s.limits.Load() }

// Stats implements runtime.Sandbox: a fake sandbox has no kernel
// accounting, so no limit is seen hit unless a test says so (SetStats).
func (s *Sandbox) Stats(context.Context) (runtime.Stats, error) {
	if err := s.rt.call(Call{Op: "stats", Sandbox: s}); err != nil {
		return runtime.Stats{}, err
	}
	if st := s.stats.Load(); st != nil {
		return *st, nil
	}
	return runtime.Stats{}, nil
}

// SetStats sets what Stats reports until the next ResetStats: the
// counters a program that hit a limit (an OOM kill, a refused fork, a
// full disk) leaves in a real sandbox.
func (s *Sandbox) SetStats(st runtime.Stats) { s.stats.Store(&st) }

// ResetStats implements runtime.Sandbox: what SetStats set is cleared.
func (s *Sandbox) ResetStats(context.Context) error {
	if err := s.rt.call(Call{Op: "reset-stats", Sandbox: s}); err != nil {
		return err
	}
	s.stats.Store(nil)
	return nil
}

// Update implements runtime.Sandbox: the limits are recorded; the disk
// size stays what it was at creation (see Fixed).
func (s *Sandbox) Update(_ context.Context, l runtime.Limits) error {
	if err := s.rt.call(Call{Op: "update", Sandbox: s, Limits: l}); err != nil {
		return err
	}
	l.DiskBytes = s.limits.Load().DiskBytes
	s.limits.Store(&l)
	return nil
}

// Usage implements runtime.Meter: what SetUsage set, else the bytes its
// files hold of its disk's size, and what SetMemoryUsage set: a fake
// sandbox's processes are not accounted.
func (s *Sandbox) Usage(context.Context) (runtime.Usage, error) {
	if err := s.rt.call(Call{Op: "usage", Sandbox: s}); err != nil {
		return runtime.Usage{}, err
	}
	if u := s.usage.Load(); u != nil {
		return *u, nil
	}
	l := s.limits.Load()
	u := runtime.Usage{MemoryBytes: s.memory.Load(), MemoryLimitBytes: l.MemoryBytes, DiskLimitBytes: l.DiskBytes}
	err := filepath.WalkDir(s.root, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // gone meanwhile: not counted
		}
		if info, err := d.Info(); err == nil && d.Type().IsRegular() {
			u.DiskBytes += info.Size()
		}
		return nil
	})
	return u, err
}

// SetUsage sets what Usage reports.
func (s *Sandbox) SetUsage(u runtime.Usage) { s.usage.Store(&u) }

// MemoryUsage reports what SetMemoryUsage set (0 at first): a fake
// sandbox's processes are not accounted, so a test says what they hold.
func (s *Sandbox) MemoryUsage() (int64, error) { return s.memory.Load(), nil }

// SetMemoryUsage sets what MemoryUsage reports: a sandbox that holds n
// bytes, as a program or a gVisor Sentry can leave one.
func (s *Sandbox) SetMemoryUsage(n int64) { s.memory.Store(n) }

// Kill implements runtime.Sandbox: the agent ends, and every process it
// started with it.
func (s *Sandbox) Kill(context.Context) error {
	_ = s.stop() // its exit status is the kill's doing
	return nil
}

// stop ends the agent, and every process it started with it; a paused
// sandbox's agent runs on for its restore.
func (s *Sandbox) stop() error {
	if s.paused.Load() {
		return nil
	}
	if s.link != nil {
		s.client.Close()
		return s.link.Close()
	}
	return s.agent.Close()
}

// Destroy implements runtime.Sandbox. A hook's error leaves the sandbox
// as it was, as a runtime that failed to tear it down can.
func (s *Sandbox) Destroy(context.Context) error {
	if err := s.rt.call(Call{Op: "destroy", Sandbox: s}); err != nil {
		return err
	}
	s.destroyOnce.Do(func() {
		_ = s.stop()
		if !s.keep {
			s.destroyErr = os.RemoveAll(s.root)
		}
		s.rt.mu.Lock()
		delete(s.rt.live, s.id)
		s.rt.mu.Unlock()
	})
	return s.destroyErr
}

// WorkspaceDir implements runtime.HostWorkspace.
func (s *Sandbox) WorkspaceDir() string { return filepath.Join(s.root, "workspace") }

// EgressDir implements runtime.EgressPort.
func (s *Sandbox) EgressDir() string { return filepath.Join(s.root, runtime.EgressPath) }

// CopyDisk implements runtime.DiskCopier. A fake sandbox's files are a
// directory beside where its disk image would be, which the copy does not
// hold: the copy is an empty image, and a sandbox made on it has a new
// directory.
func (s *Sandbox) CopyDisk(_ context.Context, dst string) error {
	if !s.keep {
		return fmt.Errorf("copy the disk of fake sandbox %s: no workspace: %w", s.id, runtime.ErrNotPausable)
	}
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	return f.Close()
}

// Interface guards.
var (
	_ runtime.Runtime       = (*Runtime)(nil)
	_ runtime.Sandbox       = (*Sandbox)(nil)
	_ runtime.HostWorkspace = (*Sandbox)(nil)
	_ runtime.EgressPort    = (*Sandbox)(nil)
	_ runtime.Fixer         = (*Runtime)(nil)
	_ runtime.Meter         = (*Sandbox)(nil)
	_ runtime.DiskCopier    = (*Sandbox)(nil)
)

// fakePasswd is a system sandbox's /etc/passwd (internal/runtime/oci
// writes the real one).
const fakePasswd = "root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/bash\n"
