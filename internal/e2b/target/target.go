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
