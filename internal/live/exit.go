package live

import (
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/sandbox"
)

// Why a process ended with its sandbox rather than by itself
// (sandbox.ProcessExit.Error).
const (
	exitSandboxEnded = "sandbox_ended"
	// exitPaused: it ended with its sandbox's pause (one whose memory
	// could not be saved).
	exitPaused = "sandbox_paused"
)

// Exit is how a process ended, typed until the wire.
type Exit struct {
	// Code is its exit code when it exited (Signal is zero).
	Code int
	// Signal is the signal that killed it, or zero.
	Signal syscall.Signal
	// Ended is set when it ended with its sandbox, not by itself
	// ("sandbox_ended", "sandbox_paused"); Code is then -1.
	Ended string
	// At is when it ended; Duration how long it ran.
	At       time.Time
	Duration time.Duration
}

// Wire is the exit as Corral's API says it: a signal's death as the
// shell's 128+n with the signal's name.
func (x Exit) Wire() sandbox.ProcessExit {
	out := sandbox.ProcessExit{ExitCode: x.Code, Error: x.Ended, EndedAt: x.At, Duration: x.Duration.Milliseconds()}
	if x.Signal != 0 {
		out.ExitCode, out.Signal = 128+int(x.Signal), unix.SignalName(x.Signal)
	}
	return out
}
