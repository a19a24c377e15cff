// Package runtime defines what Corral needs from a sandbox runtime: create a
// sandbox from an image with limits, talk to its agent, read the facts that
// decide a verdict, and destroy it leaving nothing behind. Implementations
// live in subpackages (oci: runc and runsc).
package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/corralhq/corral/internal/agent"
)

// Tier is an isolation tier.
type Tier string

// Tiers.
const (
	// TierContainer is a Linux container: namespaces, cgroups, seccomp.
	TierContainer Tier = "container"
	// TierGVisor runs the program on gVisor's user-space kernel.
	TierGVisor Tier = "gvisor"
)

// Limits bound a sandbox.
type Limits struct {
	MemoryBytes int64   // memory, swap off
	CPUCores    float64 // CFS quota, in cores
	Pids        int64   // processes and threads
	DiskBytes   int64   // what /workspace and /tmp can hold together
}

// Mount is a host path bound into the sandbox, read-only unless Writable.
// Writable binds are for Corral's own trusted work (warming a cache), never
// for a request's program.
type Mount struct {
	Source      string `json:"source"`
	Destination string `json:"destination"`
	Writable    bool   `json:"writable,omitempty"`
}

// Overlay gives the sandbox a private writable view of a read-only host
// directory (a shared build cache): reads come from Lower, writes land on
// the sandbox's own disk and count against its size.
type Overlay struct {
	Lower       string
	Destination string
	// System: a part of the image's system (a system sandbox's /usr on
	// the host image), owned by root inside; otherwise a cache, owned by
	// the sandbox user.
	System bool `json:",omitempty"`
}

// Spec describes a sandbox to create.
type Spec struct {
	// Rootfs is the image's root directory, mounted read-only.
	Rootfs string
	// Mounts are read-only binds on top of the rootfs (the host image binds
	// the host's /usr).
	Mounts   []Mount
	Overlays []Overlay
	Limits   Limits
	// System makes the sandbox a machine of its own (a live sandbox): a
	// writable root whose changes live on its disk, the agent as root
	// inside, programs as the unprivileged user unless asked (see
	// internal/runtime/oci/system.go). Otherwise the root is read-only and
	// everything runs as the unprivileged user.
	System bool
	// Workspace, if set, is the path of a disk image that persists after
	// the sandbox (a session's workspace), made with Limits.DiskBytes if it
	// does not exist yet; otherwise the sandbox gets a fresh disk that is
	// removed with it. One image must not be attached to two sandboxes at
	// once.
	Workspace string
}

// Stats are facts read from the kernel about a sandbox.
type Stats struct {
	PeakMemoryBytes int64
	// OOMKills counts processes of the sandbox the kernel's OOM killer
	// killed, for whatever reason: the sandbox's memory limit, or memory
	// running out above it (the host's, or a cgroup above the sandbox's).
	OOMKills int64
	// MemoryAtLimit: the sandbox's memory use reached its own limit in the
	// window PeakMemoryBytes measures. OOM kills while it did not were not
	// the sandbox's doing.
	MemoryAtLimit bool
	// PidsLimitHits counts forks refused because of the pids limit.
	PidsLimitHits int64
	// DiskFull is true when the sandbox's disk has no free blocks or inodes
	// left.
	DiskFull bool
}

// Usage is a reading of what a sandbox uses now, as its host sees it (on
// gVisor the Sentry, gVisor's kernel, is part of the sandbox).
type Usage struct {
	// CPUNanos is the CPU time the sandbox has used since it started, in
	// nanoseconds: a counter, whose rise between two readings over the
	// time between them is the CPU in use.
	CPUNanos int64
	// MemoryBytes is the memory the sandbox holds that the kernel cannot
	// take back without killing (its programs' memory, shared memory and
	// tmpfs; on gVisor the memory of its programs lives in the Sentry's
	// shared memory); CacheBytes is the page cache it may reclaim.
	MemoryBytes, CacheBytes int64
	// MemoryLimitBytes is its memory limit (0: none).
	MemoryLimitBytes int64
	// DiskBytes is what its disk holds, of DiskLimitBytes.
	DiskBytes, DiskLimitBytes int64
}

// Meter is a Sandbox that can read its usage of CPU, memory and disk, for
// the readings a live sandbox's clients follow. A reading is cheap (a few
// small file reads): a node takes one of every live sandbox every few
// seconds.
type Meter interface {
	Usage(ctx context.Context) (Usage, error)
}

// Runtime creates sandboxes of one tier. Implementations are safe for
// concurrent use.
type Runtime interface {
	Tier() Tier
	// Create starts a sandbox whose agent is ready for processes.
	Create(ctx context.Context, spec Spec) (Sandbox, error)
	// Reap destroys every sandbox that a previous, dead process left.
	Reap(ctx context.Context) (int, error)
}

// Sandbox is a running sandbox. Methods are safe for concurrent use.
type Sandbox interface {
	ID() string
	// Agent starts processes in the sandbox.
	Agent() *agent.Client
	// Stats reads the kernel's facts about the sandbox.
	Stats(ctx context.Context) (Stats, error)
	// ResetStats starts a new measurement window (peak memory).
	ResetStats(ctx context.Context) error
	// Update changes the limits of the running sandbox. It never lowers
	// the memory limit below what the sandbox holds: it returns a
	// *LimitBelowUsageError then, and every limit stays as it was. After
	// any other error the limits in force are unknown and the sandbox
	// should be destroyed.
	Update(ctx context.Context, l Limits) error
	// Kill kills every process in the sandbox, the agent included.
	Kill(ctx context.Context) error
	// Destroy kills the sandbox and removes everything it used. It is
	// idempotent.
	Destroy(ctx context.Context) error
}

// LimitProber is a Sandbox that can tell, while its programs still run,
// whether they hold as many processes as the pids limit allows. gVisor keeps
// its tasks inside the sentry, so refused forks leave no trace in the host
// cgroup; at a deadline, a sandbox full of processes is the fact that
// remains.
type LimitProber interface {
	// Processes returns how many processes and threads the sandbox runs
	// and how many it may.
	Processes(ctx context.Context) (n, limit int64, err error)
}

// Fixer is a Runtime that can say which limits its sandboxes keep from
// creation; the others change with Sandbox.Update. A runtime without it
// fixes them all.
type Fixer interface {
	Fixed(l Limits) Limits
}

// AgentWitness is a Sandbox that can say whether a program killed its
// agent. Where programs can signal the agent (gVisor does not shield a pid
// namespace's init the way Linux does), the agent dying without a word
// while the sandbox's host process ended on its own (it ends when its init
// does), not by a signal from outside such as the host's OOM killer, is
// the program's doing.
type AgentWitness interface {
	// AgentKilledByProgram reports whether the lost agent was killed from
	// inside the sandbox. It may wait a few seconds for the sandbox's host
	// process to end.
	AgentKilledByProgram() bool
}

// HostWorkspace is a Sandbox whose /workspace the host can read directly
// (for artifact collection after the programs are gone).
type HostWorkspace interface {
	// WorkspaceDir is the host path of the sandbox's /workspace. Everything
	// in it is the program's: open it only without following links.
	WorkspaceDir() string
}

// DiskKeeper is a Sandbox made with a disk of its own (no Spec.Workspace)
// that can keep that disk after it: a warm sandbox handed over to a live
// sandbox, whose disk must outlive it. KeepDisk moves the disk's image to
// path (which must not exist; on the same file system as the sandbox's
// runtime directory); a later sandbox whose Spec.Workspace is path attaches
// it again. It must not race Destroy.
type DiskKeeper interface {
	KeepDisk(path string) error
}

// EgressPort is a Sandbox with a host directory of its own bound read-only
// into it from its creation, where the host may put a socket for its
// programs to reach (the egress proxy of the execution that runs in it):
// so a sandbox made ahead of time (a pool's, a session's) serves
// executions with network access as well as those without.
type EgressPort interface {
	// EgressDir is the host path of the directory; inside the sandbox it
	// is EgressPath.
	EgressDir() string
}

// Pauser is a Sandbox that can be paused with its memory: its processes,
// their memory and open files, and the agent with what it was doing, are
// saved to a directory from which a Restorer brings them back. A sandbox
// that is not a Pauser (runc's) is paused with its files only: Destroy
// keeps the image of a sandbox made with Spec.Workspace, and Create with
// the same Workspace resumes on it.
type Pauser interface {
	// Pause saves the sandbox to dir (created if missing; the image takes
	// about the memory the sandbox uses) and destroys it, keeping its
	// Workspace image, which the saved state refers to: the two go
	// together until Restore. Only a sandbox made with Spec.Workspace can
	// be paused (ErrNotPausable otherwise). After an error the sandbox
	// runs on if it can; Destroy it either way when it is no longer
	// wanted.
	Pause(ctx context.Context, dir string) error
}

// DiskCopier is a Sandbox made with Spec.Workspace that can copy its
// disk's image while it runs, for a snapshot of its files: its file system
// is frozen for the copy (its programs' writes wait), so that the copy is
// consistent. dst must not exist; on error it is not left behind.
type DiskCopier interface {
	CopyDisk(ctx context.Context, dst string) error
}

// Restorer is a Runtime that restores what its sandboxes' Pause saved.
type Restorer interface {
	// Restore starts a sandbox from the state Pause saved in dir. spec must
	// be the paused sandbox's (the same Workspace image, root filesystem,
	// mounts and overlays; limits may differ where Fixer allows), else
	// ErrNoImage. The sandbox's agent is a resumed one: Ready's Hello
	// lists the processes that run (agent.ResumeState), and Attach takes
	// up their output. The saved state serves once: Restore removes it.
	Restore(ctx context.Context, spec Spec, dir string) (Sandbox, error)
}

// ErrNotPausable reports a sandbox Pause cannot save (one without a
// Workspace).
var ErrNotPausable = errors.New("sandbox cannot be paused")

// ErrNoImage reports a directory with no complete saved sandbox, or one
// saved for another spec.
var ErrNoImage = errors.New("no paused sandbox to restore")

// EgressPath is where the sandbox sees its EgressDir.
const EgressPath = "/.corral/run/egress"

// ErrLimitBelowUsage matches a *LimitBelowUsageError (errors.Is).
var ErrLimitBelowUsage = errors.New("limit below usage")

// LimitBelowUsageError reports a limit that cannot be lowered to what was
// asked because the sandbox holds more than that and the kernel cannot take
// it back: anonymous and shared memory with no swap, or a gVisor Sentry that
// has not yet returned a finished program's memory to the host. Cgroup v1
// refuses such a write (EBUSY); cgroup v2 would take it and OOM-kill, so
// Corral asks the kernel to reclaim first and refuses itself.
type LimitBelowUsageError struct {
	// Resource is the limit: "memory", or "memory+swap" where swap is
	// accounted.
	Resource string
	// Limit is what was asked and Usage what the sandbox's cgroup held
	// when it was refused, in bytes. On gVisor both include the Sentry.
	Limit, Usage int64
}

func (e *LimitBelowUsageError) Error() string {
	return fmt.Sprintf("%s limit %d MiB is below the %d MiB the sandbox holds", e.Resource, e.Limit>>20, e.Usage>>20)
}

// Is makes errors.Is(err, ErrLimitBelowUsage) match.
func (e *LimitBelowUsageError) Is(target error) bool { return target == ErrLimitBelowUsage }

// ErrUnavailable reports that the runtime cannot run here (binary missing,
// no cgroups); the message says what to install.
var ErrUnavailable = errors.New("runtime unavailable")

// Key says what a running sandbox can serve: the same tier, root
// filesystem, mounts, overlays and system. Limits come on top (see Fixer).
func Key(tier Tier, spec Spec) string {
	b, _ := json.Marshal(struct {
		Tier     Tier
		Rootfs   string
		Mounts   []Mount
		Overlays []Overlay
		System   bool `json:",omitempty"`
	}{tier, spec.Rootfs, spec.Mounts, spec.Overlays, spec.System})
	return string(b)
}

// Shape is Key without the host's paths: the tier, where each mount and
// overlay lands and what it is, and system. A sandbox saved on one node
// (its checkpoint) is restored on another whose spec has its Shape: the
// same image there comes from other directories (each node's data
// directory), which gVisor lets a restore bind anew.
func Shape(tier Tier, spec Spec) string {
	type place struct {
		Destination string
		Writable    bool `json:",omitempty"`
		Overlay     bool `json:",omitempty"`
		System      bool `json:",omitempty"`
	}
	var places []place
	for _, m := range spec.Mounts {
		places = append(places, place{Destination: m.Destination, Writable: m.Writable})
	}
	for _, o := range spec.Overlays {
		places = append(places, place{Destination: o.Destination, Overlay: true, System: o.System})
	}
	b, _ := json.Marshal(struct {
		Tier   Tier
		Places []place
		System bool `json:",omitempty"`
	}{tier, places, spec.System})
	return string(b)
}
