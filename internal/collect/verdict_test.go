package collect

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/corralhq/corral/sandbox"
)

func TestVerdict(t *testing.T) {
	cases := []struct {
		name   string
		f      Facts
		status sandbox.Status
		typ    sandbox.ErrorType
		inMsg  string
	}{
		{"success", Facts{Exited: true}, sandbox.StatusSuccess, "", ""},
		{"success despite a refused fork", Facts{Exited: true, PidsLimitHits: 3}, sandbox.StatusSuccess, "", ""},
		{"cancelled", Facts{Cancelled: true, TimedOut: true}, sandbox.StatusCancelled, sandbox.ErrCancelled, "cancelled"},
		{"runtime error", Facts{Exited: true, ExitCode: 1, Stderr: "Traceback\nValueError: boom\n"}, sandbox.StatusFailed, sandbox.ErrRuntime, "code 1: ValueError: boom"},
		{"signal", Facts{Exited: true, ExitCode: 139, Signal: "SIGSEGV"}, sandbox.StatusFailed, sandbox.ErrRuntime, "SIGSEGV"},
		{"oom", Facts{Exited: true, ExitCode: 137, Signal: "SIGKILL", OOMKills: 1, MemoryMB: 128}, sandbox.StatusFailed, sandbox.ErrOOM, "memory_mb=128"},
		{"the host's OOM kill is Corral's", Facts{Exited: true, ExitCode: 137, Signal: "SIGKILL", HostOOMKills: 1, MemoryMB: 512}, sandbox.StatusFailed, sandbox.ErrInternal, "within memory_mb=512"},
		{"the host's OOM kill of gVisor's kernel, not the program's doing", Facts{Exited: true, ExitCode: 137, Signal: "SIGKILL", HostOOMKills: 1, AgentKilled: true}, sandbox.StatusFailed, sandbox.ErrInternal, "ran out of memory"},
		{"success despite the host's OOM kill of a child", Facts{Exited: true, HostOOMKills: 1}, sandbox.StatusSuccess, "", ""},
		{"exit 137 without an OOM kill is not oom", Facts{Exited: true, ExitCode: 137, Signal: "SIGKILL"}, sandbox.StatusFailed, sandbox.ErrRuntime, "SIGKILL"},
		{"success despite a full disk", Facts{Exited: true, DiskFull: true}, sandbox.StatusSuccess, "", ""},
		{"processes seen at the limit (gVisor)", Facts{TimedOut: true, PidsAtLimit: true, PidsSeen: 80, Pids: 85}, sandbox.StatusFailed, sandbox.ErrResourceLimit, "more than 85"},
		{"pids before oom", Facts{TimedOut: true, OOMKills: 1, PidsLimitHits: 1, Pids: 256}, sandbox.StatusFailed, sandbox.ErrResourceLimit, "256"},
		{"disk", Facts{Exited: true, ExitCode: 1, DiskFull: true, DiskMB: 64}, sandbox.StatusFailed, sandbox.ErrResourceLimit, "disk_mb=64"},
		{"timeout", Facts{TimedOut: true, TimeoutMS: 1000}, sandbox.StatusFailed, sandbox.ErrTimeout, "timeout_ms=1000"},
		{"compile", Facts{Exited: true, ExitCode: 1, CompileFailed: true, Stderr: "main.go:3: undefined: x\n"}, sandbox.StatusFailed, sandbox.ErrCompile, "undefined: x"},
		{"agent killed", Facts{AgentKilled: true, CompileFailed: true}, sandbox.StatusFailed, sandbox.ErrRuntime, "killed the sandbox's agent"},
		{"compile that timed out", Facts{CompileFailed: true, TimedOut: true, TimeoutMS: 60000}, sandbox.StatusFailed, sandbox.ErrTimeout, "compile step ran longer than 60000 ms"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, f := Verdict(c.f)
			if st != c.status {
				t.Errorf("status %s, want %s", st, c.status)
			}
			if c.typ == "" {
				if f != nil {
					t.Errorf("failure %+v", f)
				}
				return
			}
			if f == nil || f.Type != c.typ || !strings.Contains(f.Message, c.inMsg) {
				t.Errorf("failure %+v, want %s containing %q", f, c.typ, c.inMsg)
			}
			if f != nil && f.Retryable != c.typ.Retryable() {
				t.Errorf("retryable %v for %s", f.Retryable, c.typ)
			}
		})
	}
}

func TestMessagesAreClipped(t *testing.T) {
	_, f := Verdict(Facts{Exited: true, ExitCode: 1, Stderr: strings.Repeat("é", 5000)})
	if len(f.Message) > maxMessage+100 {
		t.Errorf("message of %d bytes", len(f.Message))
	}
}

func TestLimitsHit(t *testing.T) {
	cases := []struct {
		name string
		f    Facts
		want []sandbox.LimitHit
	}{
		{"none", Facts{Exited: true, Pids: 64, MemoryMB: 128, DiskMB: 64}, nil},
		{"refused forks, counted", Facts{Exited: true, PidsLimitHits: 1843, Pids: 64}, []sandbox.LimitHit{{Limit: sandbox.LimitProcesses, Max: 64, Count: 1843,
			Detail: "1843 forks refused at the limit of 64 processes and threads"}}},
		{"one refused fork", Facts{Exited: true, PidsLimitHits: 1, Pids: 64}, []sandbox.LimitHit{{Limit: sandbox.LimitProcesses, Max: 64, Count: 1,
			Detail: "1 fork refused at the limit of 64 processes and threads"}}},
		// gVisor: no count, so none is claimed.
		{"probed", Facts{Exited: true, PidsAtLimit: true, PidsSeen: 80, Pids: 85}, []sandbox.LimitHit{{Limit: sandbox.LimitProcesses, Max: 85,
			Detail: "the sandbox was seen running 80 processes and threads against its limit of 85; forks beyond the limit fail"}}},
		{"counted wins over probed", Facts{Exited: true, PidsLimitHits: 3, PidsAtLimit: true, PidsSeen: 60, Pids: 64}, []sandbox.LimitHit{{Limit: sandbox.LimitProcesses, Max: 64, Count: 3,
			Detail: "3 forks refused at the limit of 64 processes and threads"}}},
		{"a child killed at the memory limit", Facts{Exited: true, OOMKills: 2, MemoryMB: 128}, []sandbox.LimitHit{{Limit: sandbox.LimitMemory, Max: 128, Count: 2,
			Detail: "2 processes killed by the kernel at the memory limit of 128 MB"}}},
		// The host's OOM kill is no limit of the sandbox's.
		{"the host's OOM kill", Facts{Exited: true, HostOOMKills: 1, MemoryMB: 128}, nil},
		{"disk", Facts{Exited: true, DiskFull: true, DiskMB: 64}, []sandbox.LimitHit{{Limit: sandbox.LimitDisk, Max: 64,
			Detail: "the 64 MB disk of /workspace and /tmp was full when the program ended; writes past it fail with ENOSPC"}}},
		{"disk full before", Facts{Exited: true, DiskFull: true, DiskFullAtStart: true, DiskMB: 64}, []sandbox.LimitHit{{Limit: sandbox.LimitDisk, Max: 64,
			Detail: "the 64 MB disk of /workspace and /tmp was full when the program started (an earlier execution filled it) and when it ended; writes past it fail with ENOSPC"}}},
		// A failure lists its limits as a success does, in a fixed order.
		{"all, on a failure", Facts{TimedOut: true, PidsLimitHits: 1, OOMKills: 1, DiskFull: true, Pids: 64, MemoryMB: 128, DiskMB: 64},
			[]sandbox.LimitHit{
				{Limit: sandbox.LimitProcesses, Max: 64, Count: 1, Detail: "1 fork refused at the limit of 64 processes and threads"},
				{Limit: sandbox.LimitMemory, Max: 128, Count: 1, Detail: "1 process killed by the kernel at the memory limit of 128 MB"},
				{Limit: sandbox.LimitDisk, Max: 64, Detail: "the 64 MB disk of /workspace and /tmp was full when the program ended; writes past it fail with ENOSPC"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if diff := cmp.Diff(c.want, LimitsHit(c.f)); diff != "" {
				t.Errorf("LimitsHit (-want +got):\n%s", diff)
			}
		})
	}
}
