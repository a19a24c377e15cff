package oci

import (
	"fmt"
	"math"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/corralhq/corral/internal/runtime"
)

// Paths inside every sandbox.
const (
	AgentPath     = "/.corral/agent"
	WorkspacePath = "/workspace"
	TmpPath       = "/tmp"
	Hostname      = "sandbox"
)

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
	// SwapAccounting says whether the memory+swap limit can be set.
	SwapAccounting bool
}

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
			// holds nothing from the host.
			Env:             []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
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
			Resources:   resources(b.Limits, b.SwapAccounting),
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
	sc, err := seccompProfile(s)
	if err != nil {
		return nil, err
	}
	s.Linux.Seccomp = sc
	return s, nil
}

func mounts(b bundle) []specs.Mount {
	m := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", fmt.Sprintf("size=%dk", shmBytes>>10)}},
		{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
	}
	for _, bm := range b.Mounts {
		m = append(m, specs.Mount{Destination: bm.Destination, Type: "bind", Source: bm.Source,
			Options: []string{"bind", "ro", "nosuid", "nodev"}})
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
