package e2b

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/corralhq/corral/internal/e2b/target"
	"github.com/corralhq/corral/internal/fault"
	"github.com/corralhq/corral/internal/validate"
)

// rest is E2B's REST answer to each kind (internal/fault): an HTTP
// status, written as E2B's {"code", "message"}. It answers the
// dispatcher's refusals too; a sandbox the dispatcher cannot reach is
// answered as E2B's edge proxy answers it (502), not here. A test checks
// it against fault.Kinds.
var rest = fault.Table[int]{
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
		fault.Gone:               http.StatusGone,
		fault.Canceled:           499,
		fault.DeadlineExceeded:   http.StatusGatewayTimeout,
	},
	Codes: map[string]int{"payload_too_large": http.StatusRequestEntityTooLarge},
}

// answer writes E2B's answer to f.
func answer(w http.ResponseWriter, f *fault.Error) {
	if f.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(f.RetryAfterSeconds()))
	}
	target.WriteError(w, rest.Answer(f), f.Message)
}

// refuse answers a request E2B's REST API refuses: kind k, saying msg.
func refuse(w http.ResponseWriter, k fault.Kind, msg string) { answer(w, fault.New(k, msg)) }

// fail answers err; an internal error's detail goes to the log.
func (s *Server) fail(w http.ResponseWriter, err error) {
	f := fault.Of(err)
	if f.Kind == fault.Internal {
		s.cfg.Log.Error("e2b: internal error", "err", err)
	}
	answer(w, f)
}

// failCreate answers the error of a create from template: a refusal of
// its image is an unknown template, as E2B says it.
func (s *Server) failCreate(w http.ResponseWriter, err error, template string) {
	var ie *validate.InputError
	if errors.As(err, &ie) && ie.Field == "image" {
		refuse(w, fault.NotFound, fmt.Sprintf("template '%s' not found", template))
		return
	}
	s.fail(w, err)
}
