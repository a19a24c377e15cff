//go:build linux

package agent

import (
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"
)

// TestReadIntegrityOf: the agent reads another process's limits, priority
// and affinity (a zygote's, at every reset), and a change to any of them,
// made from outside as a program of the same uid could, shows.
func TestReadIntegrityOf(t *testing.T) {
	cmd := startSleeper(t)
	pid := cmd.Process.Pid
	base, err := readIntegrityOf(pid)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := readIntegrityOf(pid); err != nil || !again.equal(base) {
		t.Fatalf("read twice: %v, %s", err, again.diff(base))
	}
	if len(base.affinity) == 0 || base.rlimits[unix.RLIMIT_NOFILE].Cur == 0 {
		t.Fatalf("nothing read: %+v", base)
	}
	lower := base.rlimits[unix.RLIMIT_NOFILE]
	lower.Cur--
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &lower, nil); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setpriority(unix.PRIO_PROCESS, pid, 5); err != nil {
		t.Fatal(err)
	}
	now, err := readIntegrityOf(pid)
	if err != nil {
		t.Fatal(err)
	}
	if now.equal(base) || now.rlimits[unix.RLIMIT_NOFILE] != lower {
		t.Fatalf("changes not seen: %s", now.diff(base))
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if _, err := readIntegrityOf(pid); err == nil {
		t.Fatal("a process that is gone read without an error")
	}
}

// TestProcLimits: /proc/PID/limits, read where prlimit is not allowed,
// gives what prlimit gives.
func TestProcLimits(t *testing.T) {
	cmd := startSleeper(t)
	pid := cmd.Process.Pid
	lower := unix.Rlimit{Cur: 77, Max: 1000}
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &lower, nil); err != nil {
		t.Fatal(err)
	}
	var want, got [16]unix.Rlimit
	for r := range want {
		if err := unix.Prlimit(pid, r, nil, &want[r]); err != nil {
			t.Fatal(err)
		}
	}
	if err := procLimits(pid, &got); err != nil {
		t.Fatal(err)
	}
	if got != want || got[unix.RLIMIT_NOFILE] != lower {
		t.Fatalf("/proc/%d/limits: %v, prlimit: %v", pid, got, want)
	}
}

// startSleeper starts a process that waits, killed when the test ends.
func startSleeper(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}
