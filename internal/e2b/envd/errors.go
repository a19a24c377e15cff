package envd

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"syscall"

	"connectrpc.com/connect"

	"github.com/corralhq/corral/internal/engine"
	"github.com/corralhq/corral/internal/live"
)

// fault is how a failed call is answered: a Connect code for the RPCs,
// an HTTP status for /files, and a message for the client. Messages are
// this package's own words (or the live package's words for a refused
// input):
// what the sandbox's agent or the runtime said goes to the log only.
type fault struct {
	code   connect.Code
	status int
	msg    string
}

func (f fault) connect() *connect.Error { return connect.NewError(f.code, errors.New(f.msg)) }

func invalidArg(msg string) fault {
	return fault{connect.CodeInvalidArgument, http.StatusBadRequest, msg}
}

// classify maps an error of a live sandbox to its answer, by kind.
func classify(err error, log *slog.Logger) fault {
	var ie *engine.InputError
	var ce *connect.Error
	switch {
	case errors.As(err, &ce):
		return fault{ce.Code(), httpStatus(ce.Code()), ce.Message()}
	case errors.As(err, &ie):
		return invalidArg(ie.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return fault{connect.CodeDeadlineExceeded, http.StatusGatewayTimeout, "the call took longer than its deadline"}
	case errors.Is(err, context.Canceled):
		return fault{connect.CodeCanceled, 499, "the call was canceled"}
	case errors.Is(err, live.ErrNoProcess):
		return fault{connect.CodeNotFound, http.StatusNotFound, "no such process in the sandbox"}
	case errors.Is(err, live.ErrNotFound):
		// The sandbox is gone: E2B's SDKs read unavailable (502 over
		// HTTP) as "the sandbox is not running".
		return fault{connect.CodeUnavailable, http.StatusBadGateway, "the sandbox is not running (it may have reached its timeout)"}
	case errors.Is(err, live.ErrEnded):
		return fault{connect.CodeNotFound, http.StatusNotFound, "the process has ended (or its stdin was closed)"}
	case errors.Is(err, live.ErrNoStdin):
		return fault{connect.CodeFailedPrecondition, http.StatusConflict, "the process was started without stdin (start it with stdin: true)"}
	case errors.Is(err, live.ErrNoTerminal):
		return fault{connect.CodeFailedPrecondition, http.StatusConflict, "the process was started without a terminal"}
	case errors.Is(err, live.ErrTooMany):
		return fault{connect.CodeResourceExhausted, http.StatusTooManyRequests, "the sandbox runs as many processes as it may; wait for one to end or kill one"}
	case errors.Is(err, live.ErrUnsupported):
		return fault{connect.CodeUnimplemented, http.StatusNotImplemented, "this server does not support this yet"}
	case errors.Is(err, live.ErrElsewhere):
		return fault{connect.CodeUnavailable, http.StatusServiceUnavailable, "the sandbox was just created on another node; retry"}
	case errors.Is(err, live.ErrLost):
		return fault{connect.CodeUnavailable, http.StatusServiceUnavailable,
			"the sandbox ended during the call; it is made again on its disk at the next call (its processes are lost); retry"}
	case errors.Is(err, live.ErrInvalid):
		// The live package words these for the caller (which field, which
		// bound).
		return invalidArg(strings.TrimPrefix(err.Error(), live.ErrInvalid.Error()+": "))
	}
	if kind, ok := live.Refusal(err); ok {
		return agentFault(err, kind, log)
	}
	log.Error("envd: internal error", "err", err)
	return fault{connect.CodeInternal, http.StatusInternalServerError, "internal error; retry"}
}

// agentFault answers a file operation the sandbox's agent refused, by the
// kind of the refusal alone.
func agentFault(re error, kind string, log *slog.Logger) fault {
	switch {
	case errors.Is(re, syscall.ENOENT):
		return fault{connect.CodeNotFound, http.StatusNotFound, "no such file or directory in the sandbox"}
	case errors.Is(re, syscall.EEXIST):
		return fault{connect.CodeAlreadyExists, http.StatusConflict, "something already exists at the path"}
	case errors.Is(re, syscall.ENOTDIR):
		return invalidArg("a directory named in the path is a file")
	case errors.Is(re, syscall.EISDIR):
		return invalidArg("the path is a directory; name a file")
	case errors.Is(re, live.ErrNotRegular):
		return invalidArg("the path is neither a regular file nor a directory")
	case errors.Is(re, live.ErrSymlink):
		return invalidArg("the path is a symbolic link; files are not written through links")
	case errors.Is(re, syscall.ENOSPC), errors.Is(re, syscall.EDQUOT):
		return fault{connect.CodeResourceExhausted, http.StatusInsufficientStorage, "the sandbox's disk is full"}
	case errors.Is(re, syscall.ENAMETOOLONG):
		return invalidArg("the path is too long for the sandbox's file system")
	case errors.Is(re, syscall.EACCES), errors.Is(re, syscall.EPERM):
		return fault{connect.CodePermissionDenied, http.StatusForbidden, "permission denied: a program in the sandbox took away the access to this path"}
	case errors.Is(re, live.ErrBadPath):
		return invalidArg("the path is not valid in the sandbox")
	case errors.Is(re, syscall.EXDEV):
		return invalidArg("/workspace and /tmp are separate file systems: a move between them is not possible; copy the file instead")
	case errors.Is(re, syscall.ENOTEMPTY):
		return invalidArg("the destination is a directory that is not empty")
	case errors.Is(re, syscall.EINVAL):
		return invalidArg("a directory cannot be moved into itself")
	}
	log.Error("envd: internal error", "err", re, "kind", kind)
	return fault{connect.CodeInternal, http.StatusInternalServerError, "internal error; retry"}
}

// httpStatus is the HTTP status of a Connect code (as the Connect
// protocol maps them).
func httpStatus(c connect.Code) int {
	switch c {
	case connect.CodeInvalidArgument, connect.CodeOutOfRange:
		return http.StatusBadRequest
	case connect.CodeNotFound:
		return http.StatusNotFound
	case connect.CodeAlreadyExists, connect.CodeAborted:
		return http.StatusConflict
	case connect.CodePermissionDenied:
		return http.StatusForbidden
	case connect.CodeUnauthenticated:
		return http.StatusUnauthorized
	case connect.CodeResourceExhausted:
		return http.StatusTooManyRequests
	case connect.CodeFailedPrecondition:
		return http.StatusPreconditionFailed
	case connect.CodeUnimplemented:
		return http.StatusNotImplemented
	case connect.CodeUnavailable:
		return http.StatusServiceUnavailable
	case connect.CodeDeadlineExceeded:
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}
