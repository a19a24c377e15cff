package live

import (
	"errors"
	"fmt"

	"github.com/corralhq/corral/internal/agent"
	"github.com/corralhq/corral/internal/workspace"
)

// Errors of live sandboxes. The wires (internal/api, internal/e2b/envd,
// internal/e2b/interp) answer by these, with errors.Is; what the agent
// refused matches the errno it names as well (errors.Is(err,
// syscall.ENOENT)).
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
	ErrExists = errors.New("sandbox exists")
	// ErrTooMany: the sandbox runs as many processes as it may.
	ErrTooMany = errors.New("too many processes")
	// ErrEnded: the process has ended (no stdin, no signal).
	ErrEnded = errors.New("process ended")
	// ErrUnsupported: a feature this server does not have (answered
	// 501).
	ErrUnsupported = errors.New("not supported by this server")
	// ErrNoStdin: the process was started without stdin.
	ErrNoStdin = errors.New("process has no stdin")
	// ErrNoTerminal: the process was started without a PTY.
	ErrNoTerminal = errors.New("process has no terminal")
	// ErrNoProcess: no such process in the sandbox (it matches
	// ErrNotFound too).
	ErrNoProcess = fmt.Errorf("%w: no such process", ErrNotFound)
	// ErrPaused: the sandbox is paused (a call that needs it running, or
	// a second pause).
	ErrPaused = errors.New("sandbox paused")
	// ErrNotPaused: a resume of a sandbox that is not paused.
	ErrNotPaused = errors.New("sandbox not paused")
)

// What the sandbox's agent refuses, by kind: the only place above the
// agent that names its kinds.
var (
	// ErrLost: the sandbox ended during the call; the next call makes it
	// again on its disk.
	ErrLost = agent.ErrLost
	// ErrNotRegular: the path is neither a regular file nor a directory.
	ErrNotRegular = agent.KindNotRegular
	// ErrSymlink: the path is a symbolic link, which is not followed.
	ErrSymlink = agent.KindSymlink
	// ErrBadPath: the path is not valid in the sandbox.
	ErrBadPath = agent.KindInvalid
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
