package api

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"

	"go.opentelemetry.io/otel/trace"

	"github.com/corralhq/corral/internal/fault"
	"github.com/corralhq/corral/internal/live"
)

// Error is what every failed API call answers: {"error": {...}}. The
// message is written for the caller (often a model): what is wrong and,
// where it helps, what to do.
type Error struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
	// Written, on a failed write to a process's stdin, counts the bytes of
	// the body its stdin accepted: the body's first ones.
	Written *int64 `json:"written,omitempty"`
	// RetryAfter, when set, becomes a Retry-After header (seconds).
	RetryAfter int `json:"-"`
	// TraceID names the request's trace when tracing is on
	// (docs/tracing.md): the operator finds the call's spans and log
	// lines by it.
	TraceID string `json:"trace_id,omitempty"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// v1Answer is /v1's answer to a kind: a status and the code an error
// without one of its own is answered with.
type v1Answer struct {
	status int
	code   string
}

// v1 is /v1's one error table: every error becomes a status and a code
// here, by its kind (internal/fault), or by its code where that code's
// status is not its kind's. A test checks it against fault.Kinds.
var v1 = fault.Table[v1Answer]{
	Kinds: map[fault.Kind]v1Answer{
		fault.Internal:           {http.StatusInternalServerError, "internal"},
		fault.InvalidArgument:    {http.StatusBadRequest, "invalid_request"},
		fault.NotFound:           {http.StatusNotFound, "not_found"},
		fault.AlreadyExists:      {http.StatusConflict, "conflict"},
		fault.FailedPrecondition: {http.StatusConflict, "failed_precondition"},
		fault.Unavailable:        {http.StatusServiceUnavailable, "unavailable"},
		fault.ResourceExhausted:  {http.StatusTooManyRequests, "resource_exhausted"},
		fault.Unimplemented:      {http.StatusNotImplemented, "not_implemented"},
		fault.Unauthenticated:    {http.StatusUnauthorized, "unauthorized"},
		fault.PermissionDenied:   {http.StatusForbidden, "forbidden"},
		fault.Gone:               {http.StatusGone, "gone"},
		fault.Canceled:           {499, "canceled"},
		fault.DeadlineExceeded:   {http.StatusGatewayTimeout, "deadline_exceeded"},
	},
	Codes: map[string]v1Answer{
		// What does not fit: a body over its cap, a file on a full disk.
		"payload_too_large": {http.StatusRequestEntityTooLarge, "payload_too_large"},
		// A path the sandbox's agent refuses as existing or not
		// accessible: answered so since before kinds (internal/agent).
		"invalid_request": {http.StatusBadRequest, "invalid_request"},
		// A sandbox's port nothing listens on, or whose server failed
		// (internal/ports): a proxy's 502.
		"port_closed": {http.StatusBadGateway, "port_closed"},
		"port_failed": {http.StatusBadGateway, "port_failed"},
	},
}

// asError is /v1's answer to any error, by v1. Internal detail is
// logged (with ctx: the request's trace), never sent.
func asError(ctx context.Context, err error, log *slog.Logger) *Error {
	var ae *Error
	if errors.As(err, &ae) {
		return ae
	}
	f := fault.Of(err)
	switch f.Kind {
	case fault.Internal:
		log.ErrorContext(ctx, "internal error", "err", err)
	case fault.Unavailable:
		log.WarnContext(ctx, "unavailable", "err", err)
	}
	return answer(f)
}

// answer is /v1's answer to f.
func answer(f *fault.Error) *Error {
	a := v1.Answer(f)
	code := f.Code
	if code == "" {
		code = a.code
	}
	return &Error{Status: a.status, Code: code, Field: f.Field, Message: f.Message, RetryAfter: f.RetryAfterSeconds()}
}

// refuse is the answer to a request field this package refuses.
func refuse(field, msg string) *Error { return answer(fault.Invalid(field, "%s", msg)) }

// notFound answers that what the call names is not here.
func notFound(msg string) *Error { return answer(fault.New(fault.NotFound, msg)) }

// notReady answers /readyz on a node that should not get traffic.
func notReady(msg string) *Error {
	return answer(&fault.Error{Kind: fault.Unavailable, Code: "not_ready", Message: msg})
}

// internalError answers a failure of this server that needs no log line.
func internalError(msg string) *Error { return answer(fault.New(fault.Internal, msg)) }

// writeError answers e, naming the request's trace if it has one (its
// statusWriter knows).
func writeError(w http.ResponseWriter, e *Error) {
	if sc := traceOf(w); sc.HasTraceID() && e.TraceID == "" {
		c := *e // e may be shared (a sentinel's answer)
		c.TraceID = sc.TraceID().String()
		e = &c
	}
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

// fail answers err through the error table.
func (s *Server) fail(w http.ResponseWriter, err error) {
	if s.live != nil && errors.Is(err, live.ErrLost) && s.live.Draining() {
		// The drain paused the sandbox under the call: it is moving to
		// another node, not lost, and the call sent again reaches it there.
		err = live.ErrDraining
	}
	writeError(w, asError(trace.ContextWithSpanContext(context.Background(), traceOf(w)), err, s.log))
}

// traceOf is the span of the request w answers: instrument's
// statusWriter's, under the writers wrapped around it.
func traceOf(w http.ResponseWriter) trace.SpanContext {
	for {
		switch x := w.(type) {
		case *statusWriter:
			return x.span
		case interface{ Unwrap() http.ResponseWriter }:
			w = x.Unwrap()
		default:
			return trace.SpanContext{}
		}
	}
}

// reply answers a handler's call: err through the error table, else v as
// JSON with status, or status alone when v is nil.
func (s *Server) reply(w http.ResponseWriter, status int, v any, err error) {
	switch {
	case err != nil:
		s.fail(w, err)
	case v == nil:
		w.WriteHeader(status)
	default:
		writeJSON(w, status, v)
	}
}
