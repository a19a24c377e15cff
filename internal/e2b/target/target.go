// Package target carries the sandbox an E2B in-sandbox call is for, from the dispatcher
// (internal/e2b) to the services (envd, interp), finds it for them (ErrGone once it is
// not there), and writes E2B's error bodies.
package target

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/corralhq/corral/internal/fault"
	"github.com/corralhq/corral/internal/live"
)

// Target names the live sandbox a request was dispatched to. The dispatcher sets it only
// after the access token matched and the request reached the sandbox's owner node.
type Target struct {
	Tenant    string // the tenant owning the sandbox (from the access token)
	SandboxID string // Corral's live sandbox id (same id E2B sees)
}

type key struct{}

// With returns a copy of ctx carrying t.
func With(ctx context.Context, t Target) context.Context {
	return context.WithValue(ctx, key{}, t)
}

// From returns the Target ctx carries, and whether it carries one.
func From(ctx context.Context) (Target, bool) {
	t, ok := ctx.Value(key{}).(Target)
	return t, ok
}

// ErrGone: the sandbox a call was dispatched to is not there any more. E2B's SDKs read
// the answer to it (502 over HTTP, unavailable over Connect) as "the sandbox is not
// running".
var ErrGone = fault.New(fault.Gone, "the sandbox is not running (it may have reached its timeout or been killed)")

// Sandbox returns the live sandbox t names; one that is not there (any more) is ErrGone,
// wrapping live.ErrNotFound: the dispatcher found it, so it went since.
func (t Target) Sandbox(m *live.Manager) (*live.Sandbox, error) {
	sb, err := m.Get(t.Tenant, t.SandboxID)
	if errors.Is(err, live.ErrNotFound) {
		return nil, fmt.Errorf("%w: %w", ErrGone, err)
	}
	return sb, err
}

// Statuses is the HTTP status E2B's in-sandbox services answer each kind (internal/fault)
// with, written as E2B's {"code", "message"}: the code interpreter's one table, and the
// REST API's but for gone. The SDKs read 404 as NotFoundError and 502 as the sandbox gone
// (TimeoutError, isRunning false), as E2B's own edge answers. A test checks it against
// fault.Kinds.
var Statuses = fault.Table[int]{
	Kinds: map[fault.Kind]int{
		fault.Internal:           http.StatusInternalServerError,
		fault.InvalidArgument:    http.StatusBadRequest,
		fault.NotFound:           http.StatusNotFound,
		fault.AlreadyExists:      http.StatusConflict,
		fault.FailedPrecondition: http.StatusConflict, // a second pause: E2B answers 409
		fault.Unavailable:        http.StatusServiceUnavailable,
		fault.ResourceExhausted:  http.StatusTooManyRequests,
		fault.Unimplemented:      http.StatusNotImplemented,
		fault.Unauthenticated:    http.StatusUnauthorized,
		fault.PermissionDenied:   http.StatusForbidden,
		fault.Gone:               http.StatusBadGateway,
		fault.Canceled:           499,
		fault.DeadlineExceeded:   http.StatusGatewayTimeout,
	},
	Codes: map[string]int{"payload_too_large": http.StatusRequestEntityTooLarge,
		// A sandbox's port nothing listens on, or whose server failed
		// (internal/ports): the proxy's 502.
		"port_closed": http.StatusBadGateway, "port_failed": http.StatusBadGateway},
}

// Answer writes E2B's answer to f by table t: its status, Retry-After when f has one, and
// f's message.
func Answer(w http.ResponseWriter, t fault.Table[int], f *fault.Error) {
	if f.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(f.RetryAfterSeconds()))
	}
	WriteError(w, t.Answer(f), f.Message)
}

// errorBody is E2B's error answer, read by the SDKs as {code, message}.
type errorBody struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// WriteError writes E2B's JSON error body {"code": status, "message": msg} with that status.
func WriteError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	// The status line is already sent; a failed write means the client went away.
	_ = json.NewEncoder(w).Encode(errorBody{Code: status, Message: msg})
}
