// Package fault is the one list of the kinds of failure Corral answers
// callers with, and the error that carries one. Sentinels of every
// package are *Error values (or types with a Fault method), so errors.Is
// on a sentinel still works while each wire answers by the kind alone:
// the /v1 API, E2B's REST API, envd's Connect services and the code
// interpreter each keep one table from Kind to their own codes (Table),
// which a test of theirs checks against Kinds. A fault's message is
// written for the caller; what it wraps is for the log and never sent.
package fault

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Kind is what went wrong, in terms a caller can act on.
type Kind uint8

// The kinds. Internal is the zero value: an error that says nothing of
// itself is Corral's own failure.
const (
	// Internal: Corral failed; the caller may retry.
	Internal Kind = iota
	// InvalidArgument: the request is wrong; Field names what.
	InvalidArgument
	// NotFound: no such thing for this caller.
	NotFound
	// AlreadyExists: the thing asked for exists, or the id was used for
	// something else (a conflict).
	AlreadyExists
	// FailedPrecondition: the thing is not in a state the call needs (a
	// paused sandbox, a process without stdin); the call may work once
	// that changes.
	FailedPrecondition
	// Unavailable: the server or a part of it cannot serve now; retry,
	// after RetryAfter when set.
	Unavailable
	// ResourceExhausted: a bound was reached (a queue, a quota, a disk, a
	// body's size); RetryAfter when waiting helps.
	ResourceExhausted
	// Unimplemented: this server does not do this.
	Unimplemented
	// Unauthenticated: no credentials, or unknown ones.
	Unauthenticated
	// PermissionDenied: the credentials do not allow this.
	PermissionDenied
	// Gone: the thing existed and will not come back (lost with the node
	// that held it).
	Gone
	// Canceled: the caller canceled the call.
	Canceled
	// DeadlineExceeded: the call ran past its deadline.
	DeadlineExceeded

	numKinds
)

var kindNames = [numKinds]string{
	Internal:           "internal",
	InvalidArgument:    "invalid_argument",
	NotFound:           "not_found",
	AlreadyExists:      "already_exists",
	FailedPrecondition: "failed_precondition",
	Unavailable:        "unavailable",
	ResourceExhausted:  "resource_exhausted",
	Unimplemented:      "unimplemented",
	Unauthenticated:    "unauthenticated",
	PermissionDenied:   "permission_denied",
	Gone:               "gone",
	Canceled:           "canceled",
	DeadlineExceeded:   "deadline_exceeded",
}

func (k Kind) String() string {
	if k < numKinds {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Kinds returns every kind, in order: the list each wire's table is
// checked against.
func Kinds() []Kind {
	ks := make([]Kind, numKinds)
	for i := range ks {
		ks[i] = Kind(i)
	}
	return ks
}

// Error is a failure of a kind, worded for the caller.
type Error struct {
	Kind Kind
	// Code is the public code of this failure where it has one of its own
	// ("queue_full", "sandbox_paused"); a wire answers its kind's default
	// code otherwise.
	Code string
	// Field names the request field at fault ("limits.memory_mb").
	Field string
	// Message is written for the caller (often a model): what happened
	// and, where it helps, what to do.
	Message string
	// RetryAfter, when set, is how long to wait before a retry.
	RetryAfter time.Duration
	// Err is what the fault wraps: the sentinel it refines, or the cause.
	// errors.Is and errors.As see it; its text is for the log only.
	Err error
}

// New returns a fault of kind k saying msg: a sentinel.
func New(k Kind, msg string) *Error { return &Error{Kind: k, Message: msg} }

// Invalid returns an InvalidArgument fault about field.
func Invalid(field, format string, args ...any) *Error {
	return &Error{Kind: InvalidArgument, Field: field, Message: fmt.Sprintf(format, args...)}
}

// Wrap returns a fault of kind k saying msg, wrapping cause.
func Wrap(k Kind, cause error, msg string) *Error {
	return &Error{Kind: k, Message: msg, Err: cause}
}

// With returns a fault that is e (errors.Is) with its kind, code and
// retry, saying its own words about field (which may be empty): a
// sentinel made specific.
func (e *Error) With(field, format string, args ...any) *Error {
	return &Error{Kind: e.Kind, Code: e.Code, RetryAfter: e.RetryAfter,
		Field: field, Message: fmt.Sprintf(format, args...), Err: e}
}

// Error is the message, after the field, then the cause unless it is the
// sentinel the fault refines: for the log.
func (e *Error) Error() string {
	s := e.Message
	if e.Field != "" {
		s = e.Field + ": " + s
	}
	if _, sentinel := e.Err.(*Error); e.Err != nil && !sentinel {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// RetryAfterSeconds is RetryAfter in whole seconds, rounded up: a
// Retry-After header's value.
func (e *Error) RetryAfterSeconds() int { return int((e.RetryAfter + time.Second - 1) / time.Second) }

// Fault returns e.
func (e *Error) Fault() *Error { return e }

// Faulter is an error that says which fault it is: *Error, and the error
// types of other packages whose fields make the fault (an owner node
// that is not answering, a tier being installed, an agent's refusal).
type Faulter interface {
	error
	Fault() *Error
}

// internalMessage is what a caller is told of a failure that is not a
// fault: nothing of its text.
const internalMessage = "internal error; retry"

// Of returns the fault err is: the first Faulter on its chain; else, for
// a context's end, Canceled or DeadlineExceeded; else Internal, wrapping
// err. Of(nil) is nil.
func Of(err error) *Error {
	if err == nil {
		return nil
	}
	var f Faulter
	switch {
	case errors.As(err, &f):
		return f.Fault()
	case errors.Is(err, context.Canceled):
		return Wrap(Canceled, err, "the call was canceled")
	case errors.Is(err, context.DeadlineExceeded):
		return Wrap(DeadlineExceeded, err, "the call took longer than its deadline")
	}
	return Wrap(Internal, err, internalMessage)
}

// KindOf is the kind of Of(err); Internal for nil.
func KindOf(err error) Kind {
	if f := Of(err); f != nil {
		return f.Kind
	}
	return Internal
}
