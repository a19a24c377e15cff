package agent

import (
	"errors"
	"fmt"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Kind says why the agent refused or failed a request, in a form code can
// act on: the name of the errno a system call returned ("ENOENT",
// "ENOSPC", "EADDRINUSE", ...), or one of the agent's own kinds below. It
// travels in every msgError frame next to a message, which is the agent's
// own words for logs and never for a client: the host decides what a
// client is told from the kind alone.
type Kind string

// The agent's own kinds, for failures that are not a system call's.
const (
	// KindInvalid: the request is malformed, names a path the host may
	// not use (not absolute and clean, outside /workspace and /tmp; in a
	// system sandbox, under /proc, /sys, /dev or /.corral), or names a
	// user the sandbox has not or (not a system sandbox) may not run as.
	KindInvalid Kind = "invalid_request"
	// KindNotRegular: a file to read is not a regular file (a directory,
	// a FIFO, a device).
	KindNotRegular Kind = "not_regular"
	// KindSymlink: a path passes through a symbolic link, or a file to
	// read, write, list or watch is one: the agent never goes through a
	// link (fileops.go).
	KindSymlink Kind = "symlink_refused"
	// KindZygote: the zygote a request needs is gone, did not answer in
	// time, or could not fork.
	KindZygote Kind = "zygote"
	// KindDirty: a reset found a change it cannot undo (the limits every
	// process inherits).
	KindDirty Kind = "dirty"
	// KindLimit: the request would pass one of the agent's caps (watches
	// at once).
	KindLimit Kind = "limit"
	// KindReset: the sandbox was reset for its next use (a pooled
	// sandbox): what the request held, a watch, ended with it.
	KindReset Kind = "reset"
	// KindInternal: anything else; the message says what.
	KindInternal Kind = "internal"
)

// Error makes a Kind a target for errors.Is: errors.Is(err, KindInvalid)
// holds for a *RemoteError of that kind.
func (k Kind) Error() string { return "agent error kind " + string(k) }

// Errno returns the errno k names, or 0 when it names none.
func (k Kind) Errno() syscall.Errno { return errnos()[string(k)] }

// errnos maps errno names to errnos, for the host to read them back.
var errnos = sync.OnceValue(func() map[string]syscall.Errno {
	m := map[string]syscall.Errno{}
	for e := syscall.Errno(1); e < 4096; e++ {
		if n := unix.ErrnoName(e); n != "" {
			m[n] = e
		}
	}
	return m
})

// errorReply is the payload of msgError.
type errorReply struct {
	Kind Kind `json:"kind"`
	// Message is for the host's logs only.
	Message string `json:"message"`
}

// kindOf is the kind the agent reports for err: an agent kind it carries,
// else the errno behind it, else KindInternal.
func kindOf(err error) Kind {
	var ae *agentError
	if errors.As(err, &ae) {
		return ae.kind
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		if n := unix.ErrnoName(errno); n != "" {
			return Kind(n)
		}
	}
	return KindInternal
}

// agentError is a failure of one of the agent's own kinds.
type agentError struct {
	kind Kind
	msg  string
}

func (e *agentError) Error() string { return e.msg }

// refuse makes an error of kind k.
func refuse(k Kind, format string, args ...any) error {
	return &agentError{kind: k, msg: fmt.Sprintf(format, args...)}
}

// RemoteError is a request the agent refused or could not do. Code acts on
// Kind, through errors.Is: errors.Is(err, syscall.ENOENT) (or
// fs.ErrNotExist) for a syscall's errno, errors.Is(err, KindInvalid) for
// one of the agent's kinds. Message is the agent's text, from inside the
// sandbox: for logs, never for a client.
type RemoteError struct {
	Kind    Kind
	Message string
}

func (e *RemoteError) Error() string { return "agent: " + e.Message + " (" + string(e.Kind) + ")" }

// Is reports whether e is of the kind target names: a Kind, or the
// syscall.Errno (or an error an errno matches, like fs.ErrNotExist) its
// kind names.
func (e *RemoteError) Is(target error) bool {
	if k, ok := target.(Kind); ok {
		return k == e.Kind
	}
	if errno := e.Kind.Errno(); errno != 0 {
		return errno == target || errno.Is(target)
	}
	return false
}
