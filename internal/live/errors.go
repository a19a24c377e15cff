package live

import (
	"errors"
	"fmt"
	"time"

	"github.com/corralhq/corral/internal/agent"
	"github.com/corralhq/corral/internal/fault"
	"github.com/corralhq/corral/internal/workspace"
)

// Errors of live sandboxes, each of a kind (internal/fault) that every
// wire (internal/api, internal/e2b and its services) answers by, and a
// code where /v1 has one of its own. What the agent refused is a fault of
// the agent package (agent.RemoteError) and matches the errno it names
// as well (errors.Is(err, syscall.ENOENT)).
var (
	// ErrNotFound: no such live sandbox (it may have reached its timeout),
	// or no such workspace session: one id space.
	ErrNotFound = workspace.ErrNotFound
	// ErrInvalid: a bad path, signal, token or field; the message says
	// which, worded for the caller.
	ErrInvalid = workspace.ErrInvalid
	// ErrElsewhere: another node owns the id.
	ErrElsewhere = workspace.ErrElsewhere
	// ErrExists: a sandbox or session with the id asked for exists already.
	ErrExists = &fault.Error{Kind: fault.AlreadyExists, Code: "conflict", Field: "sandbox_id",
		Message: "a sandbox or session with this id exists; choose another id"}
	// ErrTooMany: the sandbox runs as many processes as it may.
	ErrTooMany = &fault.Error{Kind: fault.ResourceExhausted, Code: "too_many_processes",
		Message: "the sandbox runs as many processes as it may; wait for one to end or signal one"}
	// ErrEnded: the process has ended (no stdin, no signal).
	ErrEnded = &fault.Error{Kind: fault.FailedPrecondition, Code: "process_ended",
		Message: "the process has ended (or its stdin was closed)"}
	// ErrUnsupported: a feature this server does not have.
	ErrUnsupported = &fault.Error{Kind: fault.Unimplemented, Code: "not_implemented",
		Message: "this server does not support this yet"}
	// ErrNotReading: a write to a process's stdin could not go on: the
	// process took none of it for Config.StdinStall (a full pipe or
	// terminal, and the agent's window). A bound reached, retryable once
	// the process reads; a *NotReadingError says how much the write got in.
	ErrNotReading = &fault.Error{Kind: fault.ResourceExhausted, Code: "process_not_reading", RetryAfter: time.Second,
		Message: "the process is not reading its stdin; send the rest once it reads, or close its stdin"}
	// ErrNoStdin: the process was started without stdin.
	ErrNoStdin = &fault.Error{Kind: fault.FailedPrecondition, Code: "no_stdin",
		Message: `the process was started without stdin (start it with "stdin": true)`}
	// ErrNoTerminal: the process was started without a PTY.
	ErrNoTerminal = &fault.Error{Kind: fault.FailedPrecondition, Code: "no_terminal",
		Message: `the process was started without a terminal (start it with "pty": {"cols": 80, "rows": 24})`}
	// ErrNoProcess: no such process in the sandbox (it matches
	// ErrNotFound too).
	ErrNoProcess = ErrNotFound.With("", "no such process in the sandbox (ended processes stay listed for a while)")
	// ErrPaused: the sandbox is paused (a call that needs it running, or
	// a second pause).
	ErrPaused = &fault.Error{Kind: fault.FailedPrecondition, Code: "sandbox_paused",
		Message: "the sandbox is paused; resume it (POST /v1/sandboxes/{id}/resume) first"}
	// ErrNotPaused: a resume of a sandbox that is not paused.
	ErrNotPaused = &fault.Error{Kind: fault.FailedPrecondition, Code: "not_paused",
		Message: "the sandbox is not paused; it runs"}
	// ErrPortClosed: nothing listens on the port of the sandbox a
	// connection was for. Its code is answered 502 on every wire.
	ErrPortClosed = &fault.Error{Kind: fault.Unavailable, Code: "port_closed",
		Message: "nothing listens on this port in the sandbox; start the server there and retry"}
	// ErrLost: the sandbox ended during the call; the next call makes it
	// again on its disk.
	ErrLost = agent.ErrLost
)

// Refusal reports whether err is a refusal of the sandbox's agent, and
// its kind (an errno's name, or one of the agent's own) for the log.
func Refusal(err error) (kind string, ok bool) {
	var re *agent.RemoteError
	if errors.As(err, &re) {
		return string(re.Kind), true
	}
	return "", false
}

// The ops of a watch's events (sandbox.FileEvent.Op).
const (
	OpCreate = agent.OpCreate
	OpWrite  = agent.OpWrite
	OpRemove = agent.OpRemove
	OpRename = agent.OpRename
	OpChmod  = agent.OpChmod
	// OpEnd is a watch's last event: it ended by itself.
	OpEnd = agent.OpEnd
)

// NotReadingError is ErrNotReading for one write: how much of its input
// the process's stdin accepted before the process stopped taking it.
type NotReadingError struct {
	// Written counts the bytes of the write's input the stdin accepted,
	// its first ones: they reach the process, in order, when it reads.
	// Nothing after them was taken. A wire whose write spans several
	// calls (envd's StreamInput) adds what the earlier ones wrote.
	Written int64
	// Stall is how long the process took none of it.
	Stall time.Duration
}

func (e *NotReadingError) Error() string {
	return fmt.Sprintf("the process took none of its stdin for %v; %d bytes were written", e.Stall, e.Written)
}

// Is makes errors.Is(err, ErrNotReading) true.
func (e *NotReadingError) Is(target error) bool { return target == ErrNotReading }

// Fault is e for a caller: what was accepted, and what to do.
func (e *NotReadingError) Fault() *fault.Error {
	accepted := "none of this input was accepted"
	if e.Written > 0 {
		accepted = fmt.Sprintf("the first %d bytes of this input were accepted (the process gets them, in order, when it reads); the rest was not", e.Written)
	}
	return ErrNotReading.With("", "the process is not reading its stdin: it took none of it for %v; %s. Send the rest once it reads, or close its stdin",
		e.Stall, accepted)
}
