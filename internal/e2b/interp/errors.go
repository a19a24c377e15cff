package interp

import (
	"net/http"

	"github.com/corralhq/corral/internal/e2b/target"
	"github.com/corralhq/corral/internal/fault"
)

// statuses is the code interpreter's one error table: the HTTP status of
// each kind (internal/fault), answered with the fault's message, never
// with text from the sandbox's agent or runtime. The SDK reads 404 as
// NotFoundError and 502 as TimeoutError ("the sandbox timed out"), as
// E2B's own edge answers for a sandbox that is gone. A test checks it
// against fault.Kinds.
var statuses = fault.Table[int]{
	Kinds: map[fault.Kind]int{
		fault.Internal:           http.StatusInternalServerError,
		fault.InvalidArgument:    http.StatusBadRequest,
		fault.NotFound:           http.StatusNotFound,
		fault.AlreadyExists:      http.StatusConflict,
		fault.FailedPrecondition: http.StatusConflict,
		fault.Unavailable:        http.StatusServiceUnavailable,
		fault.ResourceExhausted:  http.StatusTooManyRequests,
		fault.Unimplemented:      http.StatusNotImplemented,
		fault.Unauthenticated:    http.StatusUnauthorized,
		fault.PermissionDenied:   http.StatusForbidden,
		fault.Gone:               http.StatusBadGateway,
		fault.Canceled:           499,
		fault.DeadlineExceeded:   http.StatusGatewayTimeout,
	},
	Codes: map[string]int{"payload_too_large": http.StatusRequestEntityTooLarge},
}

// classify is the status and message err is answered with; an internal
// error's detail goes to the log.
func (h *handler) classify(err error) (int, string) {
	f := fault.Of(err)
	if f.Kind == fault.Internal {
		h.log.Error("code interpreter: internal error", "err", err)
	}
	return statuses.Answer(f), f.Message
}

// writeError answers err with E2B's error body.
func (h *handler) writeError(w http.ResponseWriter, err error) {
	status, msg := h.classify(err)
	target.WriteError(w, status, msg)
}

// answer writes the answer to f, a refusal of the code interpreter's own.
func answer(w http.ResponseWriter, f *fault.Error) {
	target.WriteError(w, statuses.Answer(f), f.Message)
}

// refuse answers a request the code interpreter refuses: kind k, saying
// msg.
func refuse(w http.ResponseWriter, k fault.Kind, msg string) { answer(w, fault.New(k, msg)) }
