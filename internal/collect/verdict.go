package collect

import (
	"fmt"
	"strings"

	"github.com/corralhq/corral/sandbox"
)

// Facts are what is known when an execution ends. Every field is observed,
// none inferred from an exit code alone.
type Facts struct {
	Cancelled bool
	// CompileFailed: the compile step exited non-zero, or the runner's
	// wrapper reported a compile error on its status fd.
	CompileFailed bool
	// Exited and ExitCode/Signal describe how the program ended.
	Exited   bool
	ExitCode int
	Signal   string
	TimedOut bool
	// AgentKilled: the program killed the sandbox's agent, ending the
	// sandbox under itself.
	AgentKilled bool
	// Kernel facts from the sandbox's cgroup and disk, counted from the
	// start of this execution (a kept sandbox's earlier counts are not
	// its). OOMKills are the OOM killer's kills while the sandbox was at
	// its memory limit; HostOOMKills its kills while the sandbox never
	// reached its limit: the host's memory (or a cgroup's above the
	// sandbox's) ran out, which is Corral's problem, not the program's.
	OOMKills     int64
	HostOOMKills int64
	// PidsLimitHits counts forks the pids cgroup refused.
	PidsLimitHits int64
	// PidsAtLimit: a probe saw the sandbox running PidsSeen processes and
	// threads, at (or within a tenth of) the Pids it may. Where nothing
	// counts refused forks (gVisor), it is the fact that remains.
	PidsAtLimit bool
	PidsSeen    int64
	// DiskFull: the sandbox's disk had no room left when the program
	// ended; DiskFullAtStart: already when it started (a session's disk
	// an earlier execution filled).
	DiskFull, DiskFullAtStart bool
	// Limits in force, for messages.
	TimeoutMS, MemoryMB, DiskMB, Pids int64
	// PeakMemoryMB as measured.
	PeakMemoryMB int64
	// Stderr is the program's captured stderr (head and tail).
	Stderr string
	// Explain extracts the error line from stderr; nil uses a default.
	Explain func(stderr string) string
}

// Verdict decides the final status and, for failures, the error. A run that
// exited 0 in time succeeded even if it met a limit along the way and
// recovered; otherwise the first matching cause wins: cancellation, refused
// forks, OOM kill at the memory limit, OOM kill by the host's shortage
// (internal_error, retryable), the agent killed by the program, compile
// error, a full disk, timeout, non-zero exit.
func Verdict(f Facts) (sandbox.Status, *sandbox.Failure) {
	fail := func(t sandbox.ErrorType, msg string) (sandbox.Status, *sandbox.Failure) {
		st := sandbox.StatusFailed
		if t == sandbox.ErrCancelled {
			st = sandbox.StatusCancelled
		}
		return st, &sandbox.Failure{Type: t, Message: msg, Retryable: t.Retryable()}
	}
	if f.Cancelled {
		return fail(sandbox.ErrCancelled, "the execution was cancelled")
	}
	if f.Exited && f.ExitCode == 0 && !f.TimedOut && !f.CompileFailed {
		return sandbox.StatusSuccess, nil
	}
	switch {
	case f.PidsLimitHits > 0 || f.PidsAtLimit:
		// Before OOM: a sandbox full of processes often runs out of memory
		// as a consequence (each gVisor task costs the sentry memory).
		return fail(sandbox.ErrResourceLimit, fmt.Sprintf(
			"process limit: the program tried to run more than %d processes and threads at once and a fork was refused", f.Pids))
	case f.OOMKills > 0:
		return fail(sandbox.ErrOOM, fmt.Sprintf(
			"out of memory: the program needed more than memory_mb=%d and the kernel killed it (peak %d MB); raise limits.memory_mb or use less memory",
			f.MemoryMB, f.PeakMemoryMB))
	case f.HostOOMKills > 0:
		return fail(sandbox.ErrInternal, fmt.Sprintf(
			"internal error: the server ran out of memory and the kernel killed the program, which was within memory_mb=%d (peak %d MB); retry, the same request may succeed",
			f.MemoryMB, f.PeakMemoryMB))
	case f.AgentKilled:
		return fail(sandbox.ErrRuntime,
			"the program killed the sandbox's agent (PID 1's threads), which ended the sandbox; the output up to then is kept. Running it again will end the same way")
	case f.CompileFailed && !f.TimedOut:
		return fail(sandbox.ErrCompile, compileMessage(f.Stderr))
	case f.DiskFull:
		return fail(sandbox.ErrResourceLimit, fmt.Sprintf(
			"disk full: /workspace and /tmp together hold at most disk_mb=%d; raise limits.disk_mb or write less", f.DiskMB))
	case f.TimedOut && f.CompileFailed:
		return fail(sandbox.ErrTimeout, fmt.Sprintf(
			"timeout: the compile step ran longer than %d ms and was killed; the program did not start. Send smaller code, or raise limits.timeout_ms (a compile gets at least as long as the program)", f.TimeoutMS))
	case f.TimedOut:
		return fail(sandbox.ErrTimeout, fmt.Sprintf(
			"timeout: the program ran longer than timeout_ms=%d and was killed; make it faster or raise limits.timeout_ms", f.TimeoutMS))
	}
	explain := f.Explain
	if explain == nil {
		explain = LastLine
	}
	detail := explain(f.Stderr)
	var msg string
	if f.Signal != "" {
		msg = "the program was killed by " + f.Signal
	} else {
		msg = fmt.Sprintf("the program exited with code %d", f.ExitCode)
	}
	if detail != "" {
		msg += ": " + detail
	}
	return fail(sandbox.ErrRuntime, msg)
}

// LimitsHit lists the limits that refused the program something, from the
// same facts as Verdict, whatever the verdict; nil when none did. What a
// runtime cannot observe is not claimed: gVisor keeps no count of refused
// forks, so there a processes entry has no Count and rests on the probe;
// memory entries come from OOM kills only (an allocation a language's
// runtime refused itself, a caught MemoryError without a kill, leaves no
// fact); and the disk is judged by its state when the program ended.
func LimitsHit(f Facts) []sandbox.LimitHit {
	var hits []sandbox.LimitHit
	switch {
	case f.PidsLimitHits > 0:
		hits = append(hits, sandbox.LimitHit{Limit: sandbox.LimitProcesses, Max: f.Pids, Count: f.PidsLimitHits,
			Detail: fmt.Sprintf("%s refused at the limit of %d processes and threads", count(f.PidsLimitHits, "fork", "forks"), f.Pids)})
	case f.PidsAtLimit:
		hits = append(hits, sandbox.LimitHit{Limit: sandbox.LimitProcesses, Max: f.Pids,
			Detail: fmt.Sprintf("the sandbox was seen running %d processes and threads against its limit of %d; forks beyond the limit fail", f.PidsSeen, f.Pids)})
	}
	if f.OOMKills > 0 {
		hits = append(hits, sandbox.LimitHit{Limit: sandbox.LimitMemory, Max: f.MemoryMB, Count: f.OOMKills,
			Detail: fmt.Sprintf("%s killed by the kernel at the memory limit of %d MB", count(f.OOMKills, "process", "processes"), f.MemoryMB)})
	}
	if f.DiskFull {
		when := "when the program ended"
		if f.DiskFullAtStart {
			when = "when the program started (an earlier execution filled it) and when it ended"
		}
		hits = append(hits, sandbox.LimitHit{Limit: sandbox.LimitDisk, Max: f.DiskMB,
			Detail: fmt.Sprintf("the %d MB disk of /workspace and /tmp was full %s; writes past it fail with ENOSPC", f.DiskMB, when)})
	}
	return hits
}

func count(n int64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

const maxMessage = 1000

func clip(s string) string {
	if len(s) <= maxMessage {
		return s
	}
	cut := maxMessage
	for cut > 0 && !isRuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// LastLine returns the last non-blank line of s, clipped: where most
// interpreters put the error.
func LastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n\t "), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" {
			return clip(l)
		}
	}
	return ""
}

// compileMessage keeps the first lines of a compiler's output, where the
// first error is.
func compileMessage(stderr string) string {
	s := strings.TrimSpace(stderr)
	if s == "" {
		return "the code did not compile"
	}
	lines := strings.Split(s, "\n")
	if len(lines) > 8 {
		lines = append(lines[:8], "…")
	}
	return "the code did not compile: " + clip(strings.Join(lines, "\n"))
}
