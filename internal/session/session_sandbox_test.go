package session

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/agent"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/runtime/runtimetest"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/internal/workspace"
	"github.com/corralhq/corral/sandbox"
)

// whichSandbox prints what tells sandboxes apart: the agent's start time
// (runc) and the kernel's boot id (one per gVisor sandbox).
const whichSandbox = `
start = open('/proc/1/stat').read().rsplit(')', 1)[1].split()[19]
print(start + '/' + open('/proc/sys/kernel/random/boot_id').read().strip())
`

// TestKeptSandboxOverUsageIsReplaced: when a session's kept sandbox holds
// more memory than its next execution's limit (gVisor's Sentry after a big
// program; here a live process, so the test does not race the Sentry), the
// execution runs in a new sandbox on the same disk, and the kept one is
// destroyed as expected, not reported as broken.
func TestKeptSandboxOverUsageIsReplaced(t *testing.T) {
	for _, tier := range []runtime.Tier{runtime.TierContainer, runtime.TierGVisor} {
		t.Run(string(tier), func(t *testing.T) {
			e := testenv.Engine(t)
			var logs testenv.LogBuffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			table, err := workspace.Open(t.Context(), workspace.Config{Dir: t.TempDir(), ReapInterval: time.Minute}, registry(t), log)
			if err != nil {
				t.Fatal(err)
			}
			m := New(DefaultConfig(), table, e, e.Fleet(), log)
			t.Cleanup(m.Close) // before the engine's (cleanups run last-in first)
			run := func(code string, memoryMB int64) sandbox.Result {
				t.Helper()
				job, err := e.Prepare(sandbox.ExecuteRequest{Language: "python", Code: code, SessionID: "s",
					Isolation: sandbox.Isolation(tier), Limits: sandbox.Limits{MemoryMB: memoryMB}})
				if err != nil {
					t.Fatal(err)
				}
				job.Tenant = "t"
				if err := e.Acquire(context.Background(), job, m.Acquirer("t", "s")); err != nil {
					t.Fatal(err)
				}
				r := e.Run(context.Background(), job, nil)
				if r.Status != sandbox.StatusSuccess {
					t.Fatalf("execution %s: %+v\n%s", r.Status, r.Error, r.Stderr)
				}
				return r
			}
			first := run("open('/workspace/state.txt', 'w').write('turn 1')\n"+whichSandbox, 512)
			var keptSB runtime.Sandbox
			if w, ok := table.Lookup("t", "s"); ok {
				if k, ok := table.State(w).Occupant.(*kept); ok {
					m.mu.Lock()
					keptSB = k.sb
					m.mu.Unlock()
				}
			}
			kept := keptSB
			if kept == nil {
				t.Fatal("no sandbox kept after a clean execution")
			}
			h := runtimetest.HoldMemory(t, kept, 400)
			second := run("print(open('/workspace/state.txt').read())\n"+whichSandbox, 384)
			if second.Stdout == first.Stdout || !strings.HasPrefix(second.Stdout, "turn 1\n") {
				t.Errorf("under 384 MB, with 400 MB held by the kept sandbox: %q, want the session's file from a new sandbox (the first ran in %q)",
					second.Stdout, first.Stdout)
			}
			if _, err := h.Wait(t, time.Minute); !errors.Is(err, agent.ErrLost) {
				t.Errorf("the kept sandbox's holder: %v, want it lost with its sandbox", err)
			}
			if strings.Contains(logs.String(), "update kept session sandbox") {
				t.Errorf("a refusal to lower the limit was logged as a broken sandbox:\n%s", logs.String())
			}
		})
	}
}
