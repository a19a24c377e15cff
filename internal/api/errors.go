package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"syscall"

	"github.com/corralhq/corral/internal/cluster"
	"github.com/corralhq/corral/internal/engine"
	"github.com/corralhq/corral/internal/kernel"
	"github.com/corralhq/corral/internal/live"
	"github.com/corralhq/corral/internal/node"
	"github.com/corralhq/corral/internal/store"
)

// Error is what every failed API call answers: {"error": {...}}. The
// message is written for the caller (often a model): what is wrong and,
// where it helps, what to do.
type Error struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
	// RetryAfter, when set, becomes a Retry-After header (seconds).
	RetryAfter int `json:"-"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// tierRetryAfter is the Retry-After of tier_unavailable, in seconds:
// building runsc takes minutes, and a client that retries at once only
// adds load.
const tierRetryAfter = 30

func errorf(status int, code, field, msg string) *Error {
	return &Error{Status: status, Code: code, Field: field, Message: msg}
}

// asError maps any error to the API's answer. This is the only place where
// internal errors become HTTP statuses; internal detail is logged, never
// sent.
func asError(err error, log *slog.Logger) *Error {
	var ae *Error
	var ie *engine.InputError
	var se *cluster.OwnerError
	var pe *engine.TierPendingError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &ie):
		return errorf(http.StatusBadRequest, "invalid_request", ie.Field, ie.Error())
	case errors.As(err, &pe):
		// Where the build's log is, is for the operator: the server logged
		// it when the build was seen.
		e := errorf(http.StatusServiceUnavailable, "tier_unavailable", "", fmt.Sprintf(
			"this execution runs on the %s tier (%s), which is still being installed on this server; retry after the delay in Retry-After",
			pe.Tier, pe.Reason))
		e.RetryAfter = tierRetryAfter
		return e
	case errors.Is(err, node.ErrNotFound):
		return errorf(http.StatusNotFound, "not_found", "", "no such execution")
	case errors.Is(err, node.ErrConflict):
		return errorf(http.StatusConflict, "conflict", "execution_id",
			"this execution_id was already used with a different request; use a new id or resend the same request")
	case errors.Is(err, store.ErrInvalid):
		return errorf(http.StatusBadRequest, "invalid_request", "", err.Error())
	case errors.Is(err, node.ErrQueueFull):
		e := errorf(http.StatusTooManyRequests, "queue_full", "", "the server's queue is full; retry after the delay in Retry-After")
		e.RetryAfter = 1
		return e
	case errors.As(err, &se):
		return ownerError(se, "session")
	case errors.Is(err, kernel.ErrNotFound), errors.Is(err, kernel.ErrClosed):
		return errorf(http.StatusNotFound, "not_found", "",
			"no such code context in the sandbox (a sandbox made again after it ended has lost its contexts)")
	case errors.Is(err, kernel.ErrInvalid):
		// The kernel's own words may quote the sandbox's agent: a fixed
		// message lists what is refused.
		return errorf(http.StatusBadRequest, "invalid_request", "",
			"the context request is invalid: a language without code contexts (python, bash and javascript have them), "+
				"a working directory that is not an absolute clean path or does not exist in the sandbox, an environment variable that is not KEY=VALUE, "+
				"code over 1 MiB, or a fork of a context whose language cannot fork (only python can)")
	case errors.Is(err, live.ErrPaused):
		return errorf(http.StatusConflict, "sandbox_paused", "",
			"the sandbox is paused; resume it (POST /v1/sandboxes/{id}/resume) first")
	case errors.Is(err, live.ErrNotPaused):
		return errorf(http.StatusConflict, "not_paused", "", "the sandbox is not paused; it runs")
	case errors.Is(err, live.ErrNoProcess):
		return errorf(http.StatusNotFound, "not_found", "", "no such process in the sandbox (ended processes stay listed for a while)")
	case errors.Is(err, live.ErrNotFound):
		return errorf(http.StatusNotFound, "not_found", "", "no such sandbox or session (it may have reached its timeout)")
	case errors.Is(err, live.ErrExists):
		return errorf(http.StatusConflict, "conflict", "sandbox_id", "a sandbox or session with this id exists; choose another id")
	case errors.Is(err, live.ErrTooMany):
		return errorf(http.StatusTooManyRequests, "too_many_processes", "",
			"the sandbox runs as many processes as it may; wait for one to end or signal one")
	case errors.Is(err, live.ErrNoStdin):
		return errorf(http.StatusConflict, "no_stdin", "", "the process was started without stdin (start it with \"stdin\": true)")
	case errors.Is(err, live.ErrNoTerminal):
		return errorf(http.StatusConflict, "no_terminal", "", "the process was started without a terminal (start it with \"pty\": {\"cols\": 80, \"rows\": 24})")
	case errors.Is(err, live.ErrEnded):
		return errorf(http.StatusConflict, "process_ended", "", "the process has ended (or its stdin was closed)")
	case errors.Is(err, live.ErrUnsupported):
		return errorf(http.StatusNotImplemented, "not_implemented", "", "this server does not support this yet")
	case errors.Is(err, live.ErrLost):
		e := errorf(http.StatusServiceUnavailable, "sandbox_restarting", "",
			"the sandbox ended during the call; it is made again on its disk at the next call (its processes are lost); retry")
		e.RetryAfter = 1
		return e
	case errors.Is(err, live.ErrInvalid):
		// The session and live packages word these for the caller (which
		// field, which bound).
		return errorf(http.StatusBadRequest, "invalid_request", "", strings.TrimPrefix(err.Error(), live.ErrInvalid.Error()+": "))
	case isRefusal(err):
		return agentError(err, log)
	case errors.Is(err, live.ErrElsewhere):
		e := errorf(http.StatusServiceUnavailable, "session_unavailable", "session_id",
			"the session was just created on another node; retry")
		e.RetryAfter = 1
		return e
	case errors.Is(err, store.ErrUnavailable):
		log.Warn("store unavailable", "err", err)
		e := errorf(http.StatusServiceUnavailable, "unavailable", "", "the server's database is unavailable for a moment; retry after the delay in Retry-After")
		e.RetryAfter = 1
		return e
	default:
		log.Error("internal error", "err", err)
		return errorf(http.StatusInternalServerError, "internal", "", "internal error; retry")
	}
}

// isRefusal reports whether err is a refusal of a sandbox's agent.
func isRefusal(err error) bool {
	_, ok := live.Refusal(err)
	return ok
}

// asSandboxError is asError for a call about a live sandbox: an owner
// gone or not answering is the sandbox's (sandbox_lost,
// sandbox_unavailable, field sandbox_id). Before, these were answered
// session_lost and session_unavailable with field session_id, a misnomer
// (docs/errors.md).
func asSandboxError(err error, log *slog.Logger) *Error {
	var se *cluster.OwnerError
	if errors.As(err, &se) {
		return ownerError(se, "sandbox")
	}
	return asError(err, log)
}

// ownerError answers a call for a session or sandbox (what) whose owner is
// lost (410 what_lost) or not answering (503 what_unavailable); the field
// is what_id.
func ownerError(se *cluster.OwnerError, what string) *Error {
	if se.Lost {
		return errorf(http.StatusGone, what+"_lost", what+"_id",
			what+" "+se.ID+" was lost with the node that owned it; its files are gone: create a new "+what)
	}
	e := errorf(http.StatusServiceUnavailable, what+"_unavailable", what+"_id",
		what+" "+se.ID+" is owned by a node that is not answering; retry after the delay in Retry-After")
	e.RetryAfter = 2
	return e
}

// agentError answers a file operation the sandbox's agent refused, by the
// kind of the refusal alone: the agent's message comes from inside the
// sandbox and goes to the log.
func agentError(re error, log *slog.Logger) *Error {
	bad := func(msg string) *Error { return errorf(http.StatusBadRequest, "invalid_request", "path", msg) }
	switch {
	case errors.Is(re, syscall.ENOENT):
		return errorf(http.StatusNotFound, "not_found", "", "no such file in the session")
	case errors.Is(re, syscall.ENOTDIR):
		return bad("a directory named in the path is a file")
	case errors.Is(re, live.ErrNotRegular):
		return bad("the path is neither a regular file nor a directory")
	case errors.Is(re, syscall.ENOSPC), errors.Is(re, syscall.EDQUOT):
		return errorf(http.StatusRequestEntityTooLarge, "payload_too_large", "", "the session's disk is full")
	case errors.Is(re, syscall.EISDIR):
		return bad("the path is a directory; name a file")
	case errors.Is(re, syscall.EEXIST):
		return bad("something else already exists at the path")
	case errors.Is(re, live.ErrSymlink):
		return bad("the path is a symbolic link; files are not written through links")
	case errors.Is(re, syscall.ENAMETOOLONG):
		return bad("the path is too long for the session's file system")
	case errors.Is(re, syscall.EACCES), errors.Is(re, syscall.EPERM):
		return bad("permission denied: a program in the session took away the access to this path")
	case errors.Is(re, live.ErrBadPath):
		return bad("the path is not valid in the session's workspace")
	case errors.Is(re, syscall.EXDEV):
		return bad("/workspace and /tmp are separate file systems: a move between them is not possible; copy the file instead")
	case errors.Is(re, syscall.ENOTEMPTY):
		return bad("the destination is a directory that is not empty")
	case errors.Is(re, syscall.EINVAL):
		return bad("a directory cannot be moved into itself")
	}
	kind, _ := live.Refusal(re)
	log.Error("internal error", "err", re, "kind", kind)
	return errorf(http.StatusInternalServerError, "internal", "", "internal error; retry")
}

func writeError(w http.ResponseWriter, e *Error) {
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	if e.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="corral"`)
	}
	writeJSON(w, e.Status, map[string]*Error{"error": e})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// reply answers a handler's call: err through the error table, else v as
// JSON with status, or status alone when v is nil.
func (s *Server) reply(w http.ResponseWriter, status int, v any, err error) {
	switch {
	case err != nil:
		writeError(w, asError(err, s.log))
	case v == nil:
		w.WriteHeader(status)
	default:
		writeJSON(w, status, v)
	}
}
