package agent

import "github.com/corralhq/corral/internal/fault"

// refusal is what a caller is told of one kind of refusal.
type refusal struct {
	kind fault.Kind
	// code pins /v1's answer where it predates kinds: the agent's
	// EEXIST and EACCES were answered 400 invalid_request there, and a
	// full disk 413 payload_too_large (Corral's word for "does not fit").
	code string
	// path: the refusal is about the path the call named (field "path").
	path bool
	msg  string
}

// refusals turns the agent's kinds into faults: the one place where an
// errno becomes a kind. A path the call cannot use as given (a file where
// a directory is needed, a link, a name too long, a move across file
// systems) is an invalid argument; what the sandbox's state refuses is
// not found, already exists, permission denied or resource exhausted.
// A kind not listed is an internal error (the agent's words go to the
// log).
var refusals = map[Kind]refusal{
	"ENOENT":       {fault.NotFound, "", false, "no such file or directory"},
	"EEXIST":       {fault.AlreadyExists, "invalid_request", true, "something already exists at the path"},
	"ENOTDIR":      {fault.InvalidArgument, "", true, "a directory named in the path is a file"},
	"EISDIR":       {fault.InvalidArgument, "", true, "the path is a directory; name a file"},
	KindNotRegular: {fault.InvalidArgument, "", true, "the path is neither a regular file nor a directory"},
	KindSymlink: {fault.InvalidArgument, "", true,
		"the path is or passes through a symbolic link; file calls never follow links (stat the link to see where it points)"},
	"ELOOP":        {fault.InvalidArgument, "", true, "the path passes through too many symbolic links"},
	"ENAMETOOLONG": {fault.InvalidArgument, "", true, "the path is too long for the sandbox's file system"},
	KindInvalid:    {fault.InvalidArgument, "", true, "the path is not valid in the sandbox"},
	"EXDEV": {fault.InvalidArgument, "", true,
		"/workspace and /tmp are separate file systems: a move between them is not possible; copy the file instead"},
	"ENOTEMPTY": {fault.InvalidArgument, "", true, "the destination is a directory that is not empty"},
	"EINVAL":    {fault.InvalidArgument, "", true, "a directory cannot be moved into itself"},
	"EROFS":     {fault.InvalidArgument, "", true, "the path is on a read-only file system; write under /workspace or /tmp"},
	"EACCES": {fault.PermissionDenied, "invalid_request", true,
		"permission denied: a program in the sandbox took away the access to this path"},
	"ENOSPC": {fault.ResourceExhausted, "payload_too_large", false, "the sandbox's disk is full"},
	"EMFILE": {fault.ResourceExhausted, "", false, "the sandbox has as many files open as it may"},
	"E2BIG": {fault.InvalidArgument, "", false,
		"the program's arguments and environment are more than the kernel passes to a program; send large data through a file or stdin"},
	KindLimit: {fault.ResourceExhausted, "", false, "the sandbox's agent has as many of these as it may; end one first"},
}

// aliases are kinds answered as another (ENXIO: what opening a socket
// answers).
var aliases = map[Kind]Kind{"EDQUOT": "ENOSPC", "EPERM": "EACCES", "ENFILE": "EMFILE", "ENXIO": KindNotRegular}

// Fault is the fault e is, by its kind alone: the agent's message comes
// from inside the sandbox and is never sent.
func (e *RemoteError) Fault() *fault.Error {
	k := e.Kind
	if a, ok := aliases[k]; ok {
		k = a
	}
	r, ok := refusals[k]
	if !ok {
		return fault.Wrap(fault.Internal, e, "internal error; retry")
	}
	f := &fault.Error{Kind: r.kind, Code: r.code, Message: r.msg, Err: e}
	if r.path {
		f.Field = "path"
	}
	return f
}
