package oci

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"sync"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/corralhq/corral/internal/runtime"
)

// Paths inside every sandbox.
const (
	AgentPath     = "/.corral/agent"
	CachePath     = "/.corral/cache" // language caches
	RunPath       = "/.corral/run"   // per-execution host endpoints (the egress proxy)
	WorkspacePath = "/workspace"
	TmpPath       = "/tmp"
	Hostname      = "sandbox"
)

// mountRoots are directories every image has under which Corral mounts
// host paths.
var mountRoots = []string{CachePath, RunPath}

// bundle holds what varies between sandboxes; everything else in the
// config is fixed policy.
type bundle struct {
	Rootfs      string
	Mounts      []runtime.Mount
	Limits      runtime.Limits
	DiskDir     string // host mount of the sandbox's disk
	AgentBinary string // host path of the agent, bound read-only
	CgroupsPath string
	UID, GID    uint32
	// System makes a system sandbox (system.go): a writable root, the
	// agent as root with systemCaps, and on runc a user namespace.
	System bool
	// SwapAccounting says whether the memory+swap limit can be set.
	SwapAccounting bool
	// GVisor adapts the config to runsc:
	//   - RLIMIT_NPROC is set to the pids limit: gVisor's kernel counts a
	//     user's processes per sandbox, while its tasks never reach the
	//     host's pids cgroup. (On the host kernel the count would be per
	//     uid across all sandboxes, so runc relies on the cgroup.)
	//   - the host pids limit leaves room for the sentry's own threads and
	//     its per-task stubs (systrap), so reaching the limit inside never
	//     kills the sentry itself.
	//   - clone3 is allowed: runsc's seccomp ignores the ENOSYS errno that
	//     makes glibc fall back to clone, so threads could not start.
	//     Namespaces created through it are gVisor's own.
	GVisor bool
}

// gvisorTaskMB is what one task may cost a gVisor sandbox in memory (sentry
// state, stub process, page tables): a forking python measured 3.4 to 4.4
// MB a task here.
const gvisorTaskMB = 6

// gvisorTasks is how many tasks a gVisor sandbox may run: the pids limit,
// but no more than its memory can hold, so that a fork bomb meets the
// process limit (a resource_limit) before it exhausts memory (an oom).
func gvisorTasks(l runtime.Limits) int64 {
	n := l.Pids
	if l.MemoryBytes > 0 {
		n = min(n, max(32, (l.MemoryBytes>>20)/gvisorTaskMB))
	}
	return n
}

// gvisorHostPids is the host pids limit for a gVisor sandbox whose programs
// may run tasks tasks: the sentry's threads plus up to about three and a
// half stub threads a task (measured here under a fork bomb).
func gvisorHostPids(tasks int64) int64 { return 4*tasks + 128 }

// shmBytes sizes /dev/shm; its pages count against the memory limit.
const shmBytes = 64 << 20

// cfsPeriod is the CFS period in microseconds.
const cfsPeriod = 100000

// config builds the OCI runtime config of a sandbox: read-only root, writable
// /workspace and /tmp from the sandbox disk, fresh namespaces of every kind,
// no capabilities, no new privileges, a tightened seccomp filter, masked and
// read-only kernel interfaces, a minimal /dev and cgroup limits.
func config(b bundle) (*specs.Spec, error) {
	oomScoreAdj := 1000 // under host memory pressure, sandboxes go first
	umask := uint32(0o022)
	s := &specs.Spec{
		Version: specs.Version,
		Root:    &specs.Root{Path: b.Rootfs, Readonly: true},
		Process: &specs.Process{
			User: specs.User{UID: b.UID, GID: b.GID, Umask: &umask},
			Args: []string{AgentPath, "agent"},
			// The agent builds each program's environment itself; its own
			// holds nothing from the host. Asynchronous preemption is off:
			// it signals the agent's own threads with tgkill(1, ...), which
			// the filter refuses (see initSignals). One P: the agent waits
			// on pipes, sockets and its programs, and with two the Go
			// runtime's monitor thread kept polling every 20 µs while
			// either was busy, which was half its system calls and
			// context switches per warm execution (docs/bench.md, "Where
			// a warm execution's CPU goes"); blocking calls still run on
			// threads of their own.
			Env:             []string{"PATH=/usr/local/bin:/usr/bin:/bin", "GODEBUG=asyncpreemptoff=1", "GOMAXPROCS=1"},
			Cwd:             "/",
			Capabilities:    &specs.LinuxCapabilities{},
			NoNewPrivileges: true,
			OOMScoreAdj:     &oomScoreAdj,
			Rlimits: []specs.POSIXRlimit{
				{Type: "RLIMIT_CORE", Hard: 0, Soft: 0},
				{Type: "RLIMIT_NOFILE", Hard: 4096, Soft: 1024},
				{Type: "RLIMIT_MEMLOCK", Hard: 64 << 10, Soft: 64 << 10},
				{Type: "RLIMIT_RTPRIO", Hard: 0, Soft: 0},
				{Type: "RLIMIT_NICE", Hard: 0, Soft: 0},
			},
		},
		Hostname: Hostname,
		Mounts:   mounts(b),
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace},
				{Type: specs.NetworkNamespace},
				{Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace},
				{Type: specs.MountNamespace},
				{Type: specs.CgroupNamespace},
			},
			CgroupsPath: b.CgroupsPath,
			Resources:   resources(hostLimits(b), b.SwapAccounting),
			MaskedPaths: []string{
				"/proc/asound", "/proc/acpi", "/proc/interrupts", "/proc/kcore",
				"/proc/keys", "/proc/latency_stats", "/proc/timer_list",
				"/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
				"/proc/kmsg", "/proc/kallsyms", "/proc/vmallocinfo", "/proc/slabinfo",
				"/sys/firmware", "/sys/devices/virtual/powercap", "/sys/kernel",
			},
			ReadonlyPaths: []string{
				"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
			},
			RootfsPropagation: "private",
		},
	}
	if b.GVisor && b.Limits.Pids > 0 {
		n := uint64(gvisorTasks(b.Limits))
		s.Process.Rlimits = append(s.Process.Rlimits, specs.POSIXRlimit{Type: "RLIMIT_NPROC", Hard: n, Soft: n})
	}
	if b.System {
		s.Root.Readonly = false
		s.Process.User = specs.User{UID: 0, GID: 0, Umask: &umask}
		s.Process.Capabilities = &specs.LinuxCapabilities{Bounding: systemCaps, Effective: systemCaps, Permitted: systemCaps}
		if !b.GVisor {
			s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.UserNamespace})
			s.Linux.UIDMappings = idMappings(b.UID)
			s.Linux.GIDMappings = idMappings(b.GID)
		}
	}
	sc, err := cachedSeccomp(b.GVisor, b.System)
	if err != nil {
		return nil, err
	}
	s.Linux.Seccomp = sc
	return s, nil
}

// The profile depends only on the tier and the capabilities (none, or a
// system sandbox's), so it is derived once per process for each.
var seccompProfiles = [2][2]func() (*specs.LinuxSeccomp, error){
	{
		sync.OnceValues(func() (*specs.LinuxSeccomp, error) { return seccompProfile(noCaps, false) }),
		sync.OnceValues(func() (*specs.LinuxSeccomp, error) { return seccompProfile(withCaps, false) }),
	},
	{
		sync.OnceValues(func() (*specs.LinuxSeccomp, error) { return seccompProfile(noCaps, true) }),
		sync.OnceValues(func() (*specs.LinuxSeccomp, error) { return seccompProfile(withCaps, true) }),
	},
}

var (
	noCaps   = &specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{}}}
	withCaps = &specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{
		Bounding: systemCaps, Effective: systemCaps, Permitted: systemCaps}}}
)

func cachedSeccomp(gvisor, system bool) (*specs.LinuxSeccomp, error) {
	return seccompProfiles[b2i(gvisor)][b2i(system)]()
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func mounts(b bundle) []specs.Mount {
	made := map[string]bool{}
	m := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", fmt.Sprintf("size=%dk", shmBytes>>10)}},
		{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
	}
	for _, bm := range b.Mounts {
		for _, root := range mountRoots {
			if strings.HasPrefix(bm.Destination, root+"/") && !made[root] {
				// A small tmpfs, so the runtime can create mount points
				// below it in an otherwise read-only root.
				m = append(m, specs.Mount{Destination: root, Type: "tmpfs", Source: "tmpfs",
					Options: []string{"nosuid", "nodev", "noexec", "mode=755", "size=64k"}})
				made[root] = true
			}
		}
		mode := "ro"
		if bm.Writable {
			mode = "rw"
		}
		m = append(m, specs.Mount{Destination: bm.Destination, Type: "bind", Source: bm.Source,
			Options: []string{"bind", mode, "nosuid", "nodev"}})
	}
	m = append(m,
		specs.Mount{Destination: WorkspacePath, Type: "bind", Source: filepath.Join(b.DiskDir, "workspace"),
			Options: []string{"bind", "rw", "nosuid", "nodev"}},
		specs.Mount{Destination: TmpPath, Type: "bind", Source: filepath.Join(b.DiskDir, "tmp"),
			Options: []string{"bind", "rw", "nosuid", "nodev"}},
		specs.Mount{Destination: AgentPath, Type: "bind", Source: b.AgentBinary,
			Options: []string{"bind", "ro", "nosuid", "nodev"}},
	)
	return m
}

// hostLimits are the limits the host cgroup enforces.
func hostLimits(b bundle) runtime.Limits {
	l := b.Limits
	if b.GVisor && l.Pids > 0 {
		l.Pids = gvisorHostPids(gvisorTasks(l))
	}
	return l
}

func resources(l runtime.Limits, swapAccounting bool) *specs.LinuxResources {
	r := &specs.LinuxResources{
		// Deny every device; the runtime allows its minimal default set
		// (null, zero, full, random, urandom, tty, ptmx).
		Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}},
	}
	if l.MemoryBytes > 0 {
		mem := l.MemoryBytes
		swappiness := uint64(0)
		r.Memory = &specs.LinuxMemory{Limit: &mem, Swappiness: &swappiness}
		if swapAccounting {
			swap := mem // memory+swap = memory: no swap
			r.Memory.Swap = &swap
		}
	}
	if l.CPUCores > 0 {
		quota := int64(math.Round(l.CPUCores * cfsPeriod))
		period := uint64(cfsPeriod)
		r.CPU = &specs.LinuxCPU{Quota: &quota, Period: &period}
	}
	if l.Pids > 0 {
		pids := l.Pids
		r.Pids = &specs.LinuxPids{Limit: &pids}
	}
	return r
}
