package oci

import (
	"fmt"
	"slices"

	"github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// deniedSyscalls are refused with EPERM on top of Docker's default profile:
// kernel attack surface a sandboxed program has no use for (io_uring, bpf,
// userfaultfd, perf), ways to change the mount or namespace view, keyrings,
// tracing other processes, and host administration.
var deniedSyscalls = []string{
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	"userfaultfd", "bpf", "perf_event_open",
	"keyctl", "add_key", "request_key",
	"mount", "umount", "umount2", "mount_setattr", "move_mount", "open_tree",
	"fsopen", "fsconfig", "fsmount", "fspick", "pivot_root", "chroot",
	"unshare", "setns",
	"ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
	"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
	"reboot", "swapon", "swapoff", "acct", "quotactl", "quotactl_fd",
	"open_by_handle_at", "name_to_handle_at", "lookup_dcookie",
	"modify_ldt", "iopl", "ioperm", "uselib", "vhangup", "syslog",
	"clock_settime", "clock_settime64", "settimeofday", "stime",
	"fanotify_init", "nfsservctl",
}

// Socket families a program may open: local, IPv4, IPv6, and route netlink
// (getifaddrs needs it). Packet, raw-capable, vsock, AF_ALG and the other
// netlink families are refused.
var allowedSockets = []struct{ domain, protocol uint64 }{
	{unix.AF_UNIX, anyProtocol},
	{unix.AF_INET, anyProtocol},
	{unix.AF_INET6, anyProtocol},
	{unix.AF_NETLINK, unix.NETLINK_ROUTE},
}

const anyProtocol = ^uint64(0)

// initSignals are the system calls that signal a process named by their
// first argument. They may not name PID 1, the agent: Linux shields a
// namespace's init from its descendants' signals, but gVisor does not, and
// a program that kills its supervisor must not pass for a Corral failure.
// pidfd_send_signal cannot be filtered by target (a pidfd may come from
// opening /proc/1), so it reports ENOSYS and callers fall back to kill.
var initSignals = []string{"kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "pidfd_open"}

// notInit are argument conditions, any one of which proves that a pid_t
// argument is not 1. The kernel reads only the low 32 bits, so the filter
// must too: an even value, or one with any bit from 1 to 22 set (PID_MAX_LIMIT
// is 1<<22), or a negative one (bit 31). Positive values above the limit
// name no process and are refused with the rest.
var notInit = func() []specs.LinuxSeccompArg {
	args := []specs.LinuxSeccompArg{{Index: 0, Value: 1, ValueTwo: 0, Op: specs.OpMaskedEqual}}
	for bit := 1; bit <= 22; bit++ {
		args = append(args, specs.LinuxSeccompArg{Index: 0, Value: 1 << bit, ValueTwo: 1 << bit, Op: specs.OpMaskedEqual})
	}
	return append(args, specs.LinuxSeccompArg{Index: 0, Value: 1 << 31, ValueTwo: 1 << 31, Op: specs.OpMaskedEqual})
}()

// seccompProfile derives the sandbox's filter from Docker's default profile,
// evaluated for spec's (empty) capability sets. For gVisor, clone3 is
// allowed (see bundle.GVisor).
func seccompProfile(spec *specs.Spec, gvisor bool) (*specs.LinuxSeccomp, error) {
	p, err := seccomp.GetDefaultProfile(spec)
	if err != nil {
		return nil, fmt.Errorf("default seccomp profile: %w", err)
	}
	var out []specs.LinuxSyscall
	for _, sc := range p.Syscalls {
		if slices.Contains(sc.Names, "socket") && len(sc.Names) == 1 {
			continue // replaced by allowedSockets
		}
		if gvisor && slices.Equal(sc.Names, []string{"clone3"}) && sc.Action == specs.ActErrno {
			sc = specs.LinuxSyscall{Names: sc.Names, Action: specs.ActAllow}
		}
		names := slices.DeleteFunc(slices.Clone(sc.Names), func(n string) bool {
			return slices.Contains(deniedSyscalls, n) || slices.Contains(initSignals, n) || n == "pidfd_send_signal"
		})
		if len(names) == 0 {
			continue
		}
		sc.Names = names
		out = append(out, sc)
	}
	for _, s := range allowedSockets {
		rule := specs.LinuxSyscall{
			Names:  []string{"socket"},
			Action: specs.ActAllow,
			Args:   []specs.LinuxSeccompArg{{Index: 0, Value: s.domain, Op: specs.OpEqualTo}},
		}
		if s.protocol != anyProtocol {
			rule.Args = append(rule.Args, specs.LinuxSeccompArg{Index: 2, Value: s.protocol, Op: specs.OpEqualTo})
		}
		out = append(out, rule)
	}
	for _, arg := range notInit {
		// One rule per condition: runc ORs conditions on the same argument.
		out = append(out, specs.LinuxSyscall{
			Names:  slices.Clone(initSignals),
			Action: specs.ActAllow,
			Args:   []specs.LinuxSeccompArg{arg},
		})
	}
	enosys := uint(unix.ENOSYS)
	out = append(out, specs.LinuxSyscall{
		Names:    []string{"pidfd_send_signal"},
		Action:   specs.ActErrno,
		ErrnoRet: &enosys,
	})
	eperm := uint(unix.EPERM)
	out = append(out, specs.LinuxSyscall{
		Names:    slices.Clone(deniedSyscalls),
		Action:   specs.ActErrno,
		ErrnoRet: &eperm,
	})
	p.Syscalls = out
	// The native ABI only: no 32-bit (x86) or x32 system calls, which
	// sandboxed programs do not need and which triple the filter runc
	// compiles for every sandbox (about 10 ms here).
	if len(p.Architectures) > 1 {
		p.Architectures = p.Architectures[:1]
	}
	return p, nil
}
