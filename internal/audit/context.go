package audit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
)

// Recorder takes events. Record must not block or fail the caller: the
// trail is written off the caller's path (Writer).
type Recorder interface {
	Record(e Event)
}

// Actor is who makes a call: the tenant and the key id (never the key).
type Actor struct {
	Tenant string
	KeyID  string
}

// KeyID names an API key in events: the first 16 hex digits of its
// SHA-256, the prefix of the hash a config file holds, so an operator can
// tell which key it was without the trail ever holding one.
func KeyID(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:8])
}

// TokenID names a sandbox's access token in events ("token:" and the first
// 16 hex digits of its SHA-256): E2B's in-sandbox calls carry it, not a
// key; the sandbox's create event names the key that made it.
func TokenID(token string) string { return "token:" + KeyID(token) }

// Scope is a recorder and the actor to record events for: what a request
// carries from where its caller was authenticated to where it acts.
// The zero Scope records nothing.
type Scope struct {
	rec   Recorder
	actor Actor
	// sandbox and execution are the default SandboxID and ExecutionID
	// of events recorded in the scope.
	sandbox, execution string
}

type scopeKey struct{}

// With returns ctx carrying rec and a (a nil rec: ctx unchanged).
func With(ctx context.Context, rec Recorder, a Actor) context.Context {
	if rec == nil {
		return ctx
	}
	return context.WithValue(ctx, scopeKey{}, Scope{rec: rec, actor: a})
}

// WithSandbox returns ctx whose events name sandbox id unless they name
// one themselves.
func WithSandbox(ctx context.Context, id string) context.Context {
	s, ok := ctx.Value(scopeKey{}).(Scope)
	if !ok {
		return ctx
	}
	s.sandbox = id
	return context.WithValue(ctx, scopeKey{}, s)
}

// WithExecution returns ctx whose events name execution id unless they
// name one themselves.
func WithExecution(ctx context.Context, id string) context.Context {
	s, ok := ctx.Value(scopeKey{}).(Scope)
	if !ok {
		return ctx
	}
	s.execution = id
	return context.WithValue(ctx, scopeKey{}, s)
}

// From returns the scope ctx carries (the zero Scope if none), to record
// after the call's ctx is gone (a process's end, a proxy's attempts).
func From(ctx context.Context) Scope {
	s, _ := ctx.Value(scopeKey{}).(Scope)
	return s
}

// Record records e in ctx's scope (nothing without one).
func Record(ctx context.Context, e Event) { From(ctx).Record(e) }

// Record records e for s's actor: its tenant and key id unless e names
// them, and s's sandbox unless e names one.
func (s Scope) Record(e Event) {
	if s.rec == nil {
		return
	}
	if e.Tenant == "" {
		e.Tenant = s.actor.Tenant
	}
	if e.KeyID == "" && e.Tenant == s.actor.Tenant {
		e.KeyID = s.actor.KeyID
	}
	if e.SandboxID == "" {
		e.SandboxID = s.sandbox
	}
	if e.ExecutionID == "" {
		e.ExecutionID = s.execution
	}
	if e.Outcome == "" {
		e.Outcome = OK
	}
	s.rec.Record(e)
}

// Outcome returns the outcome and error text of a call that returned err.
func Outcome(err error) (outcome, msg string) {
	if err == nil {
		return OK, ""
	}
	return Failed, err.Error()
}

// Result is e with the outcome of err.
func Result(e Event, err error) Event {
	e.Outcome, e.Error = Outcome(err)
	return e
}

// SHA256 is the hex SHA-256 of b, as fields carry digests.
func SHA256(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}
