// Package oci runs sandboxes with an OCI runtime binary: runc for the
// container tier, runsc (gVisor) for the gvisor tier. Both get the same
// bundle: a read-only image rootfs, the sandbox's own disk for /workspace and
// /tmp, and the Corral agent as PID 1, which the host drives over the
// container's stdio.
package oci

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/internal/agent"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/runtime/cgroup"
	"github.com/corralhq/corral/internal/runtime/disk"
)

// GVisorFlags are the runsc flags Corral runs gVisor with: no network
// stack but loopback, the OCI seccomp profile enforced inside the sandbox
// too, no rootfs overlay (the root is read-only anyway), and connecting to
// host unix sockets bound into the sandbox (the egress proxy's; no other
// is ever bound).
var GVisorFlags = []string{"--network=none", "--oci-seccomp", "--overlay2=none", "--host-uds=open"}

// Config configures a Runtime.
type Config struct {
	Tier runtime.Tier
	// Binary is the runc or runsc executable.
	Binary string
	// Flags go before the subcommand (runsc: --network=none ...).
	Flags []string
	// DataDir holds sandbox bundles, runtime state and disk templates.
	DataDir string
	// AgentBinary is the host path of the static agent executable.
	AgentBinary string
	// CgroupParent is the cgroup under which sandboxes are placed.
	CgroupParent string
	// UID and GID run programs in the sandbox.
	UID, GID uint32
	// StartTimeout bounds how long a sandbox may take to become ready,
	// from its start (a wait for a start slot aside).
	StartTimeout time.Duration
	// MaxStarting is how many sandboxes may be starting at once (0: two
	// per CPU). A start is CPU-bound (the runtime, the agent, gVisor's
	// kernel): 32 gVisor sandboxes started at once on 2 cores took more
	// than StartTimeout each, where queued they all start in turn.
	MaxStarting int
	Log         *slog.Logger
}

// Runtime creates sandboxes with one OCI runtime binary.
type Runtime struct {
	cfg       Config
	state     string // the runtime binary's --root
	sandboxes string // one directory per sandbox
	templates *disk.Templates
	swap      bool
	// rollbacks counts creations cancelled half-way that are being undone
	// in the background; Close waits for them.
	rollbacks sync.WaitGroup
	// starts holds a slot per sandbox starting (Config.MaxStarting).
	starts chan struct{}
	// The user namespace system sandboxes' idmapped mounts name (system.go).
	usernsOnce sync.Once
	usernsFile *os.File
	usernsErr  error
	reachOnce  sync.Once
	reachErr   error
}

// New checks cfg and prepares the data directory.
func New(cfg Config) (*Runtime, error) {
	if cfg.CgroupParent == "" {
		cfg.CgroupParent = "corral"
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 20 * time.Second
	}
	if cfg.MaxStarting <= 0 {
		cfg.MaxStarting = 2 * goruntime.NumCPU()
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if _, err := os.Stat(cfg.Binary); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", runtime.ErrUnavailable, cfg.Tier, err)
	}
	if _, err := os.Stat(cfg.AgentBinary); err != nil {
		return nil, fmt.Errorf("agent binary: %w", err)
	}
	// Sandbox processes outlive the runtime command that starts them; as a
	// subreaper this process inherits and reaps them (see Sandbox.reap).
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("become child subreaper: %w", err)
	}
	name := filepath.Base(cfg.Binary)
	r := &Runtime{
		cfg:       cfg,
		state:     filepath.Join(cfg.DataDir, "state", name),
		sandboxes: filepath.Join(sandboxesDir(cfg.DataDir), name),
		templates: disk.NewTemplates(filepath.Join(cfg.DataDir, "disks"), int(cfg.UID), int(cfg.GID)),
		swap:      cgroup.SwapAccounting(),
		starts:    make(chan struct{}, cfg.MaxStarting),
	}
	for _, d := range []string{r.state, r.sandboxes} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("create %s: %w", d, err)
		}
	}
	// Root of a runc system sandbox is an unprivileged host user (system.go)
	// that must reach its root file system: the directories on the way may
	// be passed through, not listed.
	for d := r.sandboxes; ; d = filepath.Dir(d) {
		if err := Searchable(d); err != nil {
			return nil, err
		}
		if d == filepath.Clean(cfg.DataDir) || d == filepath.Dir(d) {
			break
		}
	}
	// Corral's own work (the API, the store, a cancel's kill) comes before
	// the sandboxes' when the CPU is short.
	if err := cgroup.Yield("/" + cfg.CgroupParent); err != nil {
		cfg.Log.Warn("sandboxes keep the default CPU weight: corral may answer slowly while they are busy", "err", err)
	}
	return r, nil
}

// Close releases what the runtime keeps between sandboxes: runsc pins an
// empty network namespace under its root, which must be unmounted before
// the data directory can be removed.
func (r *Runtime) Close() error {
	r.rollbacks.Wait()
	path := filepath.Join(r.state, "null-netns")
	for unix.Unmount(path, unix.MNT_DETACH) == nil {
	}
	if r.usernsFile != nil {
		r.usernsFile.Close()
	}
	return nil
}

// SandboxDir is where sandbox id keeps its bundle and disk.
func (r *Runtime) SandboxDir(id string) string { return filepath.Join(r.sandboxes, id) }

// StateDir is the runtime binary's state root.
func (r *Runtime) StateDir() string { return r.state }

// Tier returns the runtime's tier.
func (r *Runtime) Tier() runtime.Tier { return r.cfg.Tier }

// Sandbox is a running sandbox.
type Sandbox struct {
	rt     *Runtime
	id     string
	dir    string
	cgroup string
	// counters reads the cgroup's accounting through files kept open
	// until Destroy.
	counters *cgroup.Counters
	lock     *os.File
	disk     *disk.Disk
	keep     bool // the disk is a session's and outlives the sandbox
	client   *agent.Client
	// starting, when set, delivers the exit of a runtime run that was
	// killed half-way (its caller gave up): Destroy waits for it.
	starting <-chan error
	limits   atomic.Pointer[runtime.Limits] // in force
	diag     *tail                          // the sandbox's stderr: runtime and agent diagnostics
	// initFD is a pidfd of the sandbox's init (runc: the agent; runsc: the
	// sentry) on the host, so Kill needs no runtime invocation and cannot
	// hit a reused pid.
	initFD int
	// adopted are pidfds of the sandbox's host processes that outlive the
	// runtime command and so become this process's children (it is a child
	// subreaper): the init, and runsc's gofer. Destroy reaps them.
	adopted []int

	destroyOnce sync.Once
	destroyErr  error
}

var _ runtime.Sandbox = (*Sandbox)(nil)
var _ runtime.LimitProber = (*Sandbox)(nil)
var _ runtime.HostWorkspace = (*Sandbox)(nil)
var _ runtime.EgressPort = (*Sandbox)(nil)
var _ runtime.DiskKeeper = (*Sandbox)(nil)
var _ runtime.DiskCopier = (*Sandbox)(nil)
var _ runtime.Meter = (*Sandbox)(nil)
var _ runtime.Runtime = (*Runtime)(nil)

func newID() string {
	b := make([]byte, 10)
	_, _ = rand.Read(b)
	return idPrefix + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b))
}

const idPrefix = "sb-"

// SandboxDirs lists the directories of the sandboxes of every runtime
// whose data directory is dataDir: a sandbox's directory goes last in its
// teardown, so none listed means none is left.
func SandboxDirs(dataDir string) ([]string, error) {
	return filepath.Glob(filepath.Join(sandboxesDir(dataDir), "*", idPrefix+"*"))
}

// sandboxesDir holds a directory per runtime (named after its binary) of
// the sandboxes it runs.
func sandboxesDir(dataDir string) string { return filepath.Join(dataDir, "sandboxes") }

// Create starts a sandbox and waits for its agent. A gVisor sandbox is also
// a runtime.Pauser (pause.go).
func (r *Runtime) Create(ctx context.Context, spec runtime.Spec) (runtime.Sandbox, error) {
	s, err := r.create(ctx, spec, "")
	if err != nil {
		return nil, err
	}
	return r.wrap(s, spec), nil
}

// create starts a sandbox: a new one, or with image set, the one
// checkpointed there (pause.go).
func (r *Runtime) create(ctx context.Context, spec runtime.Spec, image string) (_ *Sandbox, err error) {
	s := &Sandbox{rt: r, id: newID(), diag: &tail{max: 8 << 10}, initFD: -1}
	s.dir = filepath.Join(r.sandboxes, s.id)
	s.cgroup = "/" + r.cfg.CgroupParent + "/" + s.id
	s.counters = cgroup.NewCounters(s.cgroup)
	defer func() {
		if err == nil {
			return
		}
		// Destroy undoes whatever part of creation happened. A creation
		// cancelled by its caller (a cancelled execution) is undone in the
		// background: a teardown can take seconds (the runtime's delete,
		// the loop device letting go of the disk) that the caller must not
		// wait for. A session's disk is undone before returning: the
		// session's next sandbox attaches it again.
		if ctx.Err() != nil && !s.keep {
			r.rollbacks.Add(1)
			go func() {
				defer r.rollbacks.Done()
				if derr := s.Destroy(context.WithoutCancel(ctx)); derr != nil {
					r.cfg.Log.Warn("undo a cancelled sandbox creation", "sandbox", s.id, "err", derr)
				}
			}()
			return
		}
		if derr := s.Destroy(context.WithoutCancel(ctx)); derr != nil {
			err = errors.Join(err, derr)
		}
	}()
	if err := os.Mkdir(s.dir, 0o700); err != nil {
		return nil, fmt.Errorf("create sandbox dir: %w", err)
	}
	if spec.System {
		if err := Searchable(s.dir); err != nil {
			return nil, err
		}
	}
	// The lock marks the sandbox as owned by a live process; Reap takes
	// over sandboxes whose lock is free.
	if s.lock, err = lockFile(filepath.Join(s.dir, "lock"), false); err != nil {
		return nil, err
	}
	if spec.Workspace != "" {
		// A session's disk: made on first use, kept after the sandbox.
		s.keep = true
		if _, serr := os.Stat(spec.Workspace); errors.Is(serr, os.ErrNotExist) {
			s.disk, err = r.templates.Create(ctx, spec.Workspace, filepath.Join(s.dir, "disk"), spec.Limits.DiskBytes)
		} else {
			if err = disk.Check(ctx, spec.Workspace); err == nil {
				s.disk, err = disk.Attach(spec.Workspace, filepath.Join(s.dir, "disk"))
			}
		}
	} else {
		s.disk, err = r.templates.Create(ctx, filepath.Join(s.dir, "disk.img"), filepath.Join(s.dir, "disk"), spec.Limits.DiskBytes)
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox disk: %w", err)
	}
	mounts := slices.Clone(spec.Mounts)
	overlays := spec.Overlays
	if spec.System {
		// The image's read-only binds (the host image's /usr) become
		// writable views like its root.
		mounts, overlays = nil, slices.Clone(overlays)
		for _, m := range spec.Mounts {
			if m.Writable {
				mounts = append(mounts, m)
				continue
			}
			overlays = append(overlays, runtime.Overlay{Lower: m.Source, Destination: m.Destination, System: true})
		}
	}
	// The egress port: empty until an execution with network access puts
	// its proxy's socket there. Root's, so no program can put anything
	// else in its place.
	if err := os.Mkdir(s.EgressDir(), 0o755); err != nil {
		return nil, fmt.Errorf("create egress dir: %w", err)
	}
	mounts = append(mounts, runtime.Mount{Source: s.EgressDir(), Destination: runtime.EgressPath})
	for i, o := range overlays {
		target, err := s.overlay(i, o, spec.System)
		if err != nil {
			return nil, err
		}
		mounts = append(mounts, runtime.Mount{Source: target, Destination: o.Destination, Writable: true})
	}
	rootfs := spec.Rootfs
	if spec.System {
		if rootfs, err = s.systemRoot(spec.Rootfs); err != nil {
			return nil, err
		}
	}
	cfg, err := config(bundle{
		Rootfs:         rootfs,
		System:         spec.System,
		Mounts:         mounts,
		Limits:         spec.Limits,
		DiskDir:        s.disk.Dir,
		AgentBinary:    r.cfg.AgentBinary,
		CgroupsPath:    s.cgroup,
		UID:            r.cfg.UID,
		GID:            r.cfg.GID,
		SwapAccounting: r.swap,
		GVisor:         r.cfg.Tier == runtime.TierGVisor,
	})
	if err != nil {
		return nil, err
	}
	b, err := json.MarshalIndent(cfg, "", "\t")
	if err != nil {
		return nil, fmt.Errorf("encode config: %w", err)
	}
	if err := os.WriteFile(filepath.Join(s.dir, "config.json"), b, 0o600); err != nil {
		return nil, fmt.Errorf("write config: %w", err)
	}
	s.limits.Store(&spec.Limits)
	select {
	case r.starts <- struct{}{}:
		defer func() { <-r.starts }()
	case <-ctx.Done():
		return nil, fmt.Errorf("wait to start sandbox %s: %w", s.id, ctx.Err())
	}
	if err := s.start(ctx, image); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.StartTimeout)
	defer cancel()
	if _, err := s.client.Ready(ctx); err != nil {
		return nil, fmt.Errorf("sandbox %s did not start: %w%s", s.id, err, s.diag.suffix())
	}
	return s, nil
}

// overlay mounts a private writable view of o.Lower whose changes live on
// the sandbox's disk, and returns its host path. In a system sandbox on
// runc, the lower layer is seen through an idmapped mount (system.go); an
// overlay of the system's (not a cache's) belongs to root inside.
func (s *Sandbox) overlay(i int, o runtime.Overlay, system bool) (string, error) {
	lower := o.Lower
	owner := int(s.rt.cfg.UID)
	if o.System {
		owner = s.rootOwner()
	}
	if system && s.rt.cfg.Tier != runtime.TierGVisor {
		lower = filepath.Join(s.dir, "lower"+strconv.Itoa(i))
		if err := s.rt.idmapped(o.Lower, lower); err != nil {
			return "", err
		}
	}
	base := filepath.Join(s.disk.Dir, ".overlay", strconv.Itoa(i))
	upper, work := filepath.Join(base, "upper"), filepath.Join(base, "work")
	for _, d := range []string{upper, work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", fmt.Errorf("create overlay: %w", err)
		}
	}
	gid := int(s.rt.cfg.GID)
	if o.System {
		gid = owner
	}
	if err := os.Chown(upper, owner, gid); err != nil {
		return "", fmt.Errorf("create overlay: %w", err)
	}
	target := filepath.Join(s.dir, "overlay"+strconv.Itoa(i))
	if err := os.Mkdir(target, 0o755); err != nil {
		return "", fmt.Errorf("create overlay: %w", err)
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,index=off,metacopy=off,redirect_dir=off", lower, upper, work)
	if err := unix.Mount("overlay", target, "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return "", fmt.Errorf("mount overlay of %s: %w", o.Lower, err)
	}
	return target, nil
}

func (r *Runtime) command(ctx context.Context, args ...string) *exec.Cmd {
	full := append([]string{"--root", r.state}, r.cfg.Flags...)
	full = append(full, args...)
	cmd := exec.CommandContext(ctx, r.cfg.Binary, full...)
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.WaitDelay = time.Second
	// A runtime outliving a killed corral would finish creating a sandbox
	// after the next corral reaped its directory, and leave its cgroup.
	// Dying with us leaves a directory the next Reap finds.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// start runs the runtime detached with the control stream on the sandbox's
// stdin and stdout; with image set, it restores the sandbox checkpointed
// there instead.
func (s *Sandbox) start(ctx context.Context, image string) error {
	toAgentR, toAgentW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("control pipe: %w", err)
	}
	fromAgentR, fromAgentW, err := os.Pipe()
	if err != nil {
		toAgentR.Close()
		toAgentW.Close()
		return fmt.Errorf("control pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		toAgentR.Close()
		toAgentW.Close()
		fromAgentR.Close()
		fromAgentW.Close()
		return fmt.Errorf("diagnostics pipe: %w", err)
	}
	logPath := filepath.Join(s.dir, "runtime.log")
	pidPath := filepath.Join(s.dir, "init.pid")
	verb := "run"
	cmd := s.rt.command(ctx, "--log", logPath, "--log-format", "json",
		"run", "--detach", "--bundle", s.dir, "--pid-file", pidPath, s.id)
	if image != "" {
		verb = "restore"
		cmd = s.rt.command(ctx, "--log", logPath, "--log-format", "json",
			"restore", "--detach", "--image-path", image, "--bundle", s.dir, "--pid-file", pidPath, s.id)
	} else if s.rt.cfg.Tier == runtime.TierContainer {
		// runc only: the keyring syscalls are denied anyway.
		cmd.Args = append(cmd.Args[:len(cmd.Args)-1], "--no-new-keyring", s.id)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = toAgentR, fromAgentW, errW
	exited := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		exited <- err
	} else {
		go func() { exited <- cmd.Wait() }()
	}
	var runErr error
	select {
	case runErr = <-exited:
	case <-ctx.Done():
		// The runtime is being killed (exec.CommandContext). Killed in the
		// middle of its mounts it can take seconds to go: the caller (a
		// cancelled execution) does not wait, Destroy does before it
		// undoes the creation.
		s.starting = exited
		runErr = ctx.Err()
	}
	toAgentR.Close()
	fromAgentW.Close()
	errW.Close()
	go s.diag.drain(errR, s.rt.cfg.Log.With("sandbox", s.id))
	closer := closers{toAgentW, fromAgentR}
	if runErr != nil {
		closer.Close()
		return fmt.Errorf("%s %s: %w%s", filepath.Base(s.rt.cfg.Binary), verb, runErr, runtimeLogError(logPath))
	}
	if image != "" {
		s.client = agent.NewResumedClient(fromAgentR, toAgentW, closer)
	} else {
		s.client = agent.NewClient(fromAgentR, toAgentW, closer)
	}
	// runc writes the container's init there, runsc the sandbox process
	// (the sentry): killing either ends every program of the sandbox.
	if b, err := os.ReadFile(pidPath); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			s.initFD = s.adopt(pid)
		}
	}
	if s.rt.cfg.Tier == runtime.TierGVisor {
		s.adopt(s.rt.goferPid(s.id))
	}
	return nil
}

// adopt opens a pidfd for pid and remembers it for reaping; it returns the
// fd or -1.
func (s *Sandbox) adopt(pid int) int {
	if pid <= 0 {
		return -1
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return -1
	}
	s.adopted = append(s.adopted, fd)
	return fd
}

// goferPid reads runsc's state for the gofer process of sandbox id.
func (r *Runtime) goferPid(id string) int {
	b, err := os.ReadFile(r.statePath(id))
	if err != nil {
		return 0
	}
	var st struct {
		GoferPid int `json:"goferPid"`
	}
	if json.Unmarshal(b, &st) != nil {
		return 0
	}
	return st.GoferPid
}

// reap waits up to a second for the process behind pidfd to exit and
// collects it, so no zombie waits for the host's init (which, in a container
// or under a lazy init, may take seconds, holding the cgroup busy).
func reap(pidfd int) {
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); {
		n, err := unix.Poll(fds, 100)
		if n > 0 || (err != nil && err != unix.EINTR) {
			break
		}
	}
	var info unix.Siginfo
	// ECHILD: not our child (we were not its subreaper); its parent reaps,
	// or it was reaped already.
	_ = unix.Waitid(unix.P_PIDFD, pidfd, &info, unix.WEXITED|unix.WNOHANG, nil)
}

// ID returns the sandbox's id.
func (s *Sandbox) ID() string { return s.id }

// AgentKilledByProgram implements runtime.AgentWitness, from what the host
// saw: the sandbox is gVisor's (only there can a program kill the agent:
// seccomp refuses signals to PID 1, but not to the agent's other threads
// by TID); its sandbox process, gVisor's kernel, ended on its own, as it
// does when its init dies, and not by a signal (the host's OOM killer, a
// kill from outside); and nothing was written on the diagnostics stream
// (an agent that fails on its own writes its reason, or a Go panic).
// Anything else, or a sandbox process that has not
// ended within a few seconds of the agent, is not the program's doing.
func (s *Sandbox) AgentKilledByProgram() bool {
	if s.rt.cfg.Tier != runtime.TierGVisor || !s.diag.empty() {
		return false
	}
	ended, signalled := s.initEnded(3 * time.Second)
	return ended && !signalled
}

// How a child ended, in a siginfo's code (asm-generic/siginfo.h).
const (
	cldExited = 1
	cldKilled = 2
	cldDumped = 3
)

// initEnded waits up to timeout for the sandbox's init on the host (runc:
// the agent; runsc: the sandbox process) to end, and says whether a signal
// ended it. It does not reap it: Destroy does.
func (s *Sandbox) initEnded(timeout time.Duration) (ended, signalled bool) {
	if s.initFD < 0 {
		return false, false
	}
	fds := []unix.PollFd{{Fd: int32(s.initFD), Events: unix.POLLIN}}
	for deadline := time.Now().Add(timeout); ; {
		n, err := unix.Poll(fds, 100)
		if n > 0 {
			break
		}
		if (err != nil && err != unix.EINTR) || time.Now().After(deadline) {
			return false, false
		}
	}
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PIDFD, s.initFD, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil); err != nil {
		return false, false // not this process's child: nothing known
	}
	switch info.Code {
	case cldExited:
		return true, false
	case cldKilled, cldDumped:
		return true, true
	}
	return false, false
}

// KeepDisk implements runtime.DiskKeeper.
func (s *Sandbox) KeepDisk(path string) error {
	if s.keep || s.disk == nil {
		return errors.New("the sandbox's disk is kept already")
	}
	if err := s.disk.Rename(path); err != nil {
		return err
	}
	s.keep = true
	return nil
}

// CopyDisk implements runtime.DiskCopier.
func (s *Sandbox) CopyDisk(ctx context.Context, dst string) error {
	if !s.keep || s.disk == nil {
		return fmt.Errorf("copy the disk of sandbox %s: it has no workspace image of its own: %w", s.id, runtime.ErrNotPausable)
	}
	return s.disk.CopyFrozen(dst)
}

// WorkspaceDir is the host path of the sandbox's /workspace.
func (s *Sandbox) WorkspaceDir() string { return filepath.Join(s.disk.Dir, disk.WorkspaceDir) }

// EgressDir implements runtime.EgressPort.
func (s *Sandbox) EgressDir() string { return filepath.Join(s.dir, "egress") }

// Agent returns the client of the sandbox's agent.
func (s *Sandbox) Agent() *agent.Client { return s.client }

// Stats reads the sandbox's cgroup and disk.
func (s *Sandbox) Stats(ctx context.Context) (runtime.Stats, error) {
	cs, err := s.counters.Read()
	if err != nil {
		return runtime.Stats{}, err
	}
	return runtime.Stats{
		PeakMemoryBytes: cs.PeakMemoryBytes,
		OOMKills:        cs.OOMKills,
		MemoryAtLimit:   cs.MemoryAtLimit,
		PidsLimitHits:   cs.PidsLimitHits,
		DiskFull:        s.disk.Full(),
	}, nil
}

// Usage implements runtime.Meter: the sandbox's cgroup (on gVisor the
// Sentry and gofer with it) and its disk.
func (s *Sandbox) Usage(ctx context.Context) (runtime.Usage, error) {
	cu, err := cgroup.ReadUsage(s.cgroup)
	if err != nil {
		return runtime.Usage{}, fmt.Errorf("usage of sandbox %s: %w", s.id, err)
	}
	used, size, err := s.disk.Usage()
	if err != nil {
		return runtime.Usage{}, fmt.Errorf("usage of sandbox %s: %w", s.id, err)
	}
	return runtime.Usage{CPUNanos: cu.CPUNanos, MemoryBytes: cu.MemoryBytes, CacheBytes: cu.CacheBytes,
		MemoryLimitBytes: cu.MemoryLimitBytes, DiskBytes: used, DiskLimitBytes: size}, nil
}

// ResetStats restarts the peak-memory measurement.
func (s *Sandbox) ResetStats(ctx context.Context) error { return s.counters.ResetPeak() }

// Update applies new memory, CPU and pids limits to the running sandbox by
// writing its cgroup (a warm claim must not pay for a runtime process).
// The disk size is fixed at creation, and on gVisor so is the task limit
// (RLIMIT_NPROC inside the sandbox): Fixed says which limits those are.
//
// A memory limit below what the sandbox holds is refused with a
// *runtime.LimitBelowUsageError and nothing changes. Update does not try
// to make the sandbox give memory back first: the kernel's limit write
// already reclaims what it can (page cache; without swap, a program's
// memory and shared memory are not reclaimable), and gVisor's Sentry
// returns a finished program's memory to the host on its own schedule
// (about 1 GB/s here, from a background goroutine nothing outside can
// hurry). Waiting for it would cost a claim more than a new sandbox.
func (s *Sandbox) Update(ctx context.Context, l runtime.Limits) error {
	if cur := s.limits.Load(); cur.MemoryBytes == l.MemoryBytes && cur.CPUCores == l.CPUCores && cur.Pids == l.Pids {
		return nil // in force already: a claim like the last one writes nothing
	}
	gvisor := s.rt.cfg.Tier == runtime.TierGVisor
	host := hostLimits(bundle{Limits: l, GVisor: gvisor})
	cl := cgroup.Limits{MemoryBytes: host.MemoryBytes, PeriodUS: cfsPeriod, CPUQuotaUS: -1, Pids: host.Pids}
	if host.CPUCores > 0 {
		cl.CPUQuotaUS = int64(math.Round(host.CPUCores * cfsPeriod))
	}
	if err := cgroup.SetLimits(s.cgroup, cl, s.rt.swap); err != nil {
		return fmt.Errorf("update sandbox %s: %w", s.id, err)
	}
	l.DiskBytes = s.limits.Load().DiskBytes
	s.limits.Store(&l)
	return nil
}

// Fixed returns the part of l that a sandbox keeps from its creation: the
// disk size and, on gVisor, the task limit. Sandboxes whose Fixed limits
// are equal can serve each other's requests after an Update.
func (r *Runtime) Fixed(l runtime.Limits) runtime.Limits {
	f := runtime.Limits{DiskBytes: l.DiskBytes}
	if r.cfg.Tier == runtime.TierGVisor {
		f.Pids = gvisorTasks(l)
	}
	return f
}

// MemoryUsage returns what the sandbox's processes use now (a pre-started
// interpreter, say).
func (s *Sandbox) MemoryUsage() (int64, error) { return s.counters.MemoryUsage() }

// Processes reports how many tasks the sandbox runs and may run: from the
// cgroup for runc, from the sentry's own count for runsc.
func (s *Sandbox) Processes(ctx context.Context) (int64, int64, error) {
	if s.rt.cfg.Tier != runtime.TierGVisor {
		n, err := cgroup.Processes(s.cgroup)
		return n, s.limits.Load().Pids, err
	}
	limit := gvisorTasks(*s.limits.Load())
	out, err := s.rt.command(ctx, "events", "--stats", s.id).Output()
	if err != nil {
		return 0, limit, fmt.Errorf("runsc events: %w", err)
	}
	var ev struct {
		Data struct {
			Pids struct {
				Current int64 `json:"current"`
			} `json:"pids"`
		} `json:"data"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(out), &ev); err != nil {
		return 0, limit, fmt.Errorf("decode runsc events: %w", err)
	}
	return ev.Data.Pids.Current, limit, nil
}

// Kill kills every process of the sandbox. Killing the agent, which is
// PID 1 of the sandbox's pid namespace, makes the kernel kill everything
// else in one sweep; unlike signalling each process (runc kill --all),
// this cannot race with a fork bomb.
func (s *Sandbox) Kill(ctx context.Context) error {
	if err := cgroup.Unthrottle(s.cgroup); err != nil {
		s.rt.cfg.Log.Debug("unthrottle before kill", "sandbox", s.id, "err", err)
	} else {
		l := *s.limits.Load()
		l.CPUCores = 0 // what the cgroup now says
		s.limits.Store(&l)
	}
	if s.initFD >= 0 && unix.PidfdSendSignal(s.initFD, unix.SIGKILL, nil, 0) == nil {
		return nil
	}
	out, err := s.rt.command(ctx, "kill", s.id, "KILL").CombinedOutput()
	if err != nil {
		return fmt.Errorf("kill sandbox %s: %w: %s", s.id, err, bytes.TrimSpace(out))
	}
	return nil
}

// Destroy kills the sandbox, deletes it from the runtime, unmounts and
// removes its disk (unless it is a session's) and its directory.
func (s *Sandbox) Destroy(ctx context.Context) error {
	s.destroyOnce.Do(func() {
		var errs []error
		if s.starting != nil {
			<-s.starting // the runtime's run, killed: gone before its work is undone
		}
		if s.client != nil {
			s.client.Close()
		}
		// Kill and reap ourselves: a zombie keeps the cgroup busy, and the
		// runtime's delete then retries for a while.
		if s.initFD >= 0 {
			_ = unix.PidfdSendSignal(s.initFD, unix.SIGKILL, nil, 0)
			reap(s.initFD)
		}
		// Whatever else is in the cgroup: the runtime's delete refuses a
		// cgroup that still has processes, and what the runtime started
		// and never reported (a creation killed half-way leaves runsc's
		// sandbox and gofer) holds the disk's mounts. A killed process
		// leaves in milliseconds, but under a stalled kernel its exit has
		// taken tens of seconds here, and a cgroup removed before it left
		// stayed behind for good: wait for it that long.
		if err := cgroup.Kill(s.cgroup, killWait); err != nil {
			errs = append(errs, err)
		}
		if err := s.rt.deleteContainer(ctx, s.id); err != nil {
			errs = append(errs, err)
		}
		for _, fd := range s.adopted {
			reap(fd)
			unix.Close(fd)
		}
		s.adopted, s.initFD = nil, -1
		// A system sandbox's root, the overlays, then the idmapped
		// layers they lie on (system.go).
		overlays, _ := filepath.Glob(filepath.Join(s.dir, "overlay*"))
		lowers, _ := filepath.Glob(filepath.Join(s.dir, "lower*"))
		for _, m := range slices.Concat([]string{filepath.Join(s.dir, "rootfs")}, overlays, lowers) {
			if err := disk.Unmount(m); err != nil {
				errs = append(errs, err)
			}
		}
		if s.disk != nil {
			if err := s.disk.Detach(!s.keep); err != nil {
				errs = append(errs, err)
			}
		}
		// Open files of a removed cgroup would keep it in the kernel.
		if err := s.counters.Close(); err != nil {
			errs = append(errs, err)
		}
		if err := cgroup.Remove(s.cgroup); err != nil {
			errs = append(errs, err)
		}
		if err := os.RemoveAll(s.dir); err != nil {
			errs = append(errs, fmt.Errorf("remove sandbox dir: %w", err))
		}
		if s.lock != nil {
			s.lock.Close()
		}
		s.destroyErr = errors.Join(errs...)
	})
	return s.destroyErr
}

// killWait bounds how long Destroy waits for the processes it killed to
// leave their cgroup.
const killWait = 2 * time.Minute

// deleteContainer removes a container from the runtime's state. For runc, a
// plain delete of a stopped container is immediate while --force (for one
// still running) polls in 100 ms steps, so --force is the fallback; runsc
// needs --force once its sandbox process is gone. A container the runtime
// does not know is not an error: whether it knows it is read from its
// state directory, not from what its delete prints.
func (r *Runtime) deleteContainer(ctx context.Context, id string) error {
	if !r.knows(id) {
		return nil // a creation that failed before the runtime recorded it
	}
	var out []byte
	var err error
	if r.cfg.Tier == runtime.TierContainer {
		out, err = r.command(ctx, "delete", id).CombinedOutput()
		if err == nil || !r.knows(id) {
			return nil
		}
	}
	for attempt := 0; attempt < 5; attempt++ {
		out, err = r.command(ctx, "delete", "--force", id).CombinedOutput()
		if err == nil || !r.knows(id) {
			return nil
		}
		time.Sleep(time.Duration(attempt+1) * 20 * time.Millisecond)
	}
	return fmt.Errorf("delete sandbox %s: %w: %s", id, err, bytes.TrimSpace(out))
}

// knows reports whether the runtime's state directory holds container id:
// runc keeps a directory per container, runsc a state file per container
// of a sandbox (Corral's sandboxes hold one container, of the same id).
// Anything but a clear "not there" counts as known.
func (r *Runtime) knows(id string) bool {
	_, err := os.Lstat(r.statePath(id))
	return !errors.Is(err, os.ErrNotExist)
}

// statePath is where the runtime records container id.
func (r *Runtime) statePath(id string) string {
	if r.cfg.Tier == runtime.TierGVisor {
		return filepath.Join(r.state, id+"_sandbox:"+id+".state")
	}
	return filepath.Join(r.state, id)
}

// Reap destroys every sandbox in the data directory whose owner process is
// gone: after a crash or kill -9, the next start leaves nothing behind.
func (r *Runtime) Reap(ctx context.Context) (int, error) {
	entries, err := os.ReadDir(r.sandboxes)
	if err != nil {
		return 0, fmt.Errorf("list sandboxes: %w", err)
	}
	n := 0
	var errs []error
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(r.sandboxes, e.Name())
		lock, err := lockFile(filepath.Join(dir, "lock"), true)
		if errors.Is(err, errLocked) {
			continue // a live process owns it
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		s := &Sandbox{rt: r, id: e.Name(), dir: dir, lock: lock, initFD: -1, cgroup: "/" + r.cfg.CgroupParent + "/" + e.Name()}
		s.counters = cgroup.NewCounters(s.cgroup)
		if _, err := os.Stat(filepath.Join(dir, "disk.img")); err == nil {
			s.disk = &disk.Disk{Image: filepath.Join(dir, "disk.img"), Dir: filepath.Join(dir, "disk")}
		} else {
			// A session's disk: unmount, keep the image.
			s.keep = true
			s.disk = &disk.Disk{Dir: filepath.Join(dir, "disk")}
		}
		if err := s.Destroy(ctx); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

var errLocked = errors.New("locked")

// lockFile opens path and takes an exclusive flock on it. With tryOnly, a
// lock held elsewhere gives errLocked and a missing file gives (nil, nil).
func lockFile(path string, tryOnly bool) (*os.File, error) {
	flags := os.O_RDWR | os.O_CREATE
	if tryOnly {
		flags = os.O_RDWR
	}
	f, err := os.OpenFile(path, flags, 0o600)
	if err != nil {
		if tryOnly && errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("open lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, errLocked
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return f, nil
}

type closers []io.Closer

func (c closers) Close() error {
	var errs []error
	for _, x := range c {
		errs = append(errs, x.Close())
	}
	return errors.Join(errs...)
}

// runtimeLogError returns the last error message in a runc/runsc JSON log,
// formatted as a suffix.
func runtimeLogError(path string) string {
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		return ""
	}
	var last string
	for _, line := range bytes.Split(b, []byte("\n")) {
		var entry struct {
			Level string `json:"level"`
			Msg   string `json:"msg"`
		}
		if json.Unmarshal(line, &entry) == nil && (entry.Level == "error" || entry.Level == "fatal") {
			last = entry.Msg
		}
	}
	if last == "" {
		return ""
	}
	return ": " + last
}

// tail keeps the last bytes of a diagnostics stream and logs its lines.
type tail struct {
	max int

	mu  sync.Mutex
	buf []byte
}

func (t *tail) drain(r io.ReadCloser, log *slog.Logger) {
	defer r.Close()
	buf := make([]byte, 4096)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			t.mu.Lock()
			t.buf = append(t.buf, buf[:n]...)
			if len(t.buf) > t.max {
				t.buf = t.buf[len(t.buf)-t.max:]
			}
			t.mu.Unlock()
			log.Debug("sandbox diagnostics", "text", string(bytes.TrimSpace(buf[:n])))
		}
		if err != nil {
			return
		}
	}
}

func (t *tail) empty() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(bytes.TrimSpace(t.buf)) == 0
}

func (t *tail) suffix() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := strings.TrimSpace(string(t.buf))
	if s == "" {
		return ""
	}
	return ": " + s
}
