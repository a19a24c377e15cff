package sandbox

import (
	"errors"
	"net/http"
	"strconv"
	"time"
)

// A call fails in one of three ways, told apart with errors.As:
//
//   - *Error: the execution ran (or was refused by the sandbox) and did not
//     succeed. The Result is attached; what to do depends on Type.
//   - *APIError: the server answered with an error (bad request, unknown
//     id, full queue, ...). Compare with the sentinels below via errors.Is.
//   - *TransportError: no usable answer came (connection refused or reset,
//     a response that is not JSON). Usually worth retrying.
//
// When the call's context ends (or Config.Timeout passes), the error wraps
// the context's error instead: errors.Is(err, context.DeadlineExceeded).

// Error is a failed execution: it ran, or was refused by the sandbox, and
// did not succeed. Execute and Wait return it together with the Result.
type Error struct {
	// Type classifies the failure; switch on it to decide what to do.
	Type ErrorType
	// Message is written for a human or a model: what went wrong and where.
	Message string
	// Retryable is true when the same request may succeed if sent again
	// unchanged (Corral's own failures).
	Retryable bool
	// Result is the whole record: stdout, stderr, exit code, usage.
	Result *Result
}

func (e *Error) Error() string {
	id := ""
	if e.Result != nil {
		id = " " + e.Result.ExecutionID
	}
	return "corral: execution" + id + " " + string(e.Type) + ": " + e.Message
}

// failure turns a final record into an *Error, or nil when it succeeded.
func failure(r *Result) error {
	switch {
	case r.Status == StatusSuccess:
		return nil
	case r.Error != nil:
		return &Error{Type: r.Error.Type, Message: r.Error.Message, Retryable: r.Error.Retryable, Result: r}
	case r.Status == StatusCancelled:
		return &Error{Type: ErrCancelled, Message: "the execution was cancelled", Result: r}
	default:
		return &Error{Type: ErrInternal, Message: "the execution ended " + string(r.Status) + " without an error record",
			Retryable: true, Result: r}
	}
}

// Sentinels for API errors, matched by errors.Is against an *APIError.
var (
	// ErrInvalidRequest: 400, the request is wrong; APIError.Field names
	// the field.
	ErrInvalidRequest = errors.New("corral: invalid request")
	// ErrUnauthorized: 401, the API key is missing or unknown.
	ErrUnauthorized = errors.New("corral: unauthorized")
	// ErrNotFound: 404, no such execution for this key's tenant.
	ErrNotFound = errors.New("corral: not found")
	// ErrConflict: 409, the execution id was used for a different request.
	ErrConflict = errors.New("corral: conflict")
	// ErrPayloadTooLarge: 413, the request body is above the server's cap.
	ErrPayloadTooLarge = errors.New("corral: payload too large")
	// ErrQueueFull: 429 queue_full, the server's queue is at its bound;
	// retry after APIError.RetryAfter.
	ErrQueueFull = errors.New("corral: queue full")
	// ErrRateLimited: any other 429, e.g. a tenant quota.
	ErrRateLimited = errors.New("corral: rate limited")
	// ErrSessionLost: 410 session_lost, the node that owned the session
	// is gone and its files with it; create a new session. It matches
	// every 410, sandbox_lost too.
	ErrSessionLost = errors.New("corral: session lost")
	// ErrSandboxLost: 410 sandbox_lost, the node that owned the live
	// sandbox is gone and the sandbox with it; create a new sandbox.
	ErrSandboxLost = errors.New("corral: sandbox lost")
	// ErrTierUnavailable: 503 tier_unavailable, the isolation tier the
	// request needs (gVisor, asked for or picked by auto) is still being
	// installed on the server; retry after APIError.RetryAfter. It also
	// matches ErrServer.
	ErrTierUnavailable = errors.New("corral: tier unavailable")
	// ErrImagePending: 503 image_pending, the image the request names is
	// still being built on the server (make run builds the python image
	// in the background); retry after APIError.RetryAfter. It also
	// matches ErrServer.
	ErrImagePending = errors.New("corral: image pending")
	// ErrServer: a 5xx answer; the server or something before it failed.
	ErrServer = errors.New("corral: server error")
)

// APIError is an error answer of the API:
// {"error": {"code", "message", "field"}}.
type APIError struct {
	// Status is the HTTP status, e.g. 404.
	Status int
	// Code is the machine-readable code, e.g. "not_found", "queue_full",
	// "invalid_request", "tier_unavailable"; "http_<status>" when the
	// answer was not Corral's (a proxy's).
	Code string
	// Message explains the error to a human or a model.
	Message string
	// Field names the request field at fault (e.g. "limits.memory_mb").
	Field string
	// TraceID is the call's trace on the server, when it exports traces:
	// the operator finds the call's spans and log lines by it.
	TraceID string
	// RetryAfter is the server's Retry-After (429, 503), zero if none.
	RetryAfter time.Duration
}

func (e *APIError) Error() string {
	s := "corral: " + strconv.Itoa(e.Status) + " " + e.Code
	if e.Field != "" {
		s += " (" + e.Field + ")"
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Is matches the sentinel errors by status and code.
func (e *APIError) Is(target error) bool {
	if ok, known := e.isLive(target); known {
		return ok
	}
	switch target {
	case ErrInvalidRequest:
		return e.Status == http.StatusBadRequest
	case ErrUnauthorized:
		return e.Status == http.StatusUnauthorized
	case ErrNotFound:
		return e.Status == http.StatusNotFound
	case ErrConflict:
		return e.Status == http.StatusConflict
	case ErrPayloadTooLarge:
		return e.Status == http.StatusRequestEntityTooLarge
	case ErrQueueFull:
		return e.Status == http.StatusTooManyRequests && e.Code == "queue_full"
	case ErrRateLimited:
		return e.Status == http.StatusTooManyRequests && e.Code != "queue_full"
	case ErrSessionLost:
		return e.Status == http.StatusGone
	case ErrSandboxLost:
		return e.Status == http.StatusGone && e.Code == "sandbox_lost"
	case ErrTierUnavailable:
		return e.Status == http.StatusServiceUnavailable && e.Code == "tier_unavailable"
	case ErrImagePending:
		return e.Status == http.StatusServiceUnavailable && e.Code == "image_pending"
	case ErrServer:
		return e.Status >= 500
	}
	return false
}

// temporary reports whether the same call may succeed later.
func (e *APIError) temporary() bool {
	switch e.Status {
	case http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// TransportError is a call that got no usable answer: the connection
// failed or broke, or the answer could not be read. The server may or may
// not have acted on the request; calls that are safe to repeat were
// already retried (Config.MaxRetries).
type TransportError struct {
	// Op is the request, e.g. "POST /v1/executions".
	Op string
	// ExecutionID is the execution the call was about, if known: after a
	// failed Execute or Submit, GetExecution or Cancel it by this id.
	ExecutionID string
	Err         error
}

func (e *TransportError) Error() string {
	s := "corral: " + e.Op
	if e.ExecutionID != "" {
		s += " (execution " + e.ExecutionID + ")"
	}
	return s + ": " + e.Err.Error()
}

func (e *TransportError) Unwrap() error { return e.Err }
