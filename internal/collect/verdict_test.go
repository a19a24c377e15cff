package collect

import (
	"strings"
	"testing"

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
		{"exit 137 without an OOM kill is not oom", Facts{Exited: true, ExitCode: 137, Signal: "SIGKILL"}, sandbox.StatusFailed, sandbox.ErrRuntime, "SIGKILL"},
		{"pids before oom", Facts{TimedOut: true, OOMKills: 1, PidsLimitHits: 1, Pids: 256}, sandbox.StatusFailed, sandbox.ErrResourceLimit, "256"},
		{"disk", Facts{Exited: true, ExitCode: 1, DiskFull: true, DiskMB: 64}, sandbox.StatusFailed, sandbox.ErrResourceLimit, "disk_mb=64"},
		{"timeout", Facts{TimedOut: true, TimeoutMS: 1000}, sandbox.StatusFailed, sandbox.ErrTimeout, "timeout_ms=1000"},
		{"compile", Facts{Exited: true, ExitCode: 1, CompileFailed: true, Stderr: "main.go:3: undefined: x\n"}, sandbox.StatusFailed, sandbox.ErrCompile, "undefined: x"},
		{"agent killed", Facts{AgentKilled: true, CompileFailed: true}, sandbox.StatusFailed, sandbox.ErrRuntime, "killed the sandbox's agent"},
		{"compile that timed out", Facts{CompileFailed: true, TimedOut: true, TimeoutMS: 60000}, sandbox.StatusFailed, sandbox.ErrTimeout, "60000"},
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
		})
	}
}

func TestMessagesAreClipped(t *testing.T) {
	_, f := Verdict(Facts{Exited: true, ExitCode: 1, Stderr: strings.Repeat("é", 5000)})
	if len(f.Message) > maxMessage+100 {
		t.Errorf("message of %d bytes", len(f.Message))
	}
}
