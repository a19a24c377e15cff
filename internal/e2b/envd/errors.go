package envd

import (
	"context"
	"errors"
	"log/slog"
	"net/http"

	"connectrpc.com/connect"

	"github.com/corralhq/corral/internal/fault"
)

// answer is how a failed call is answered: a Connect code for the RPCs,
// an HTTP status for /files and /health, and the fault's message, written
// for the client. What the sandbox's agent or the runtime said goes to
// the log only.
type answer struct {
	code   connect.Code
	status int
	msg    string
}

func (a answer) connect() *connect.Error { return connect.NewError(a.code, errors.New(a.msg)) }

// wire is envd's one error table: the Connect code and HTTP status of
// each kind (internal/fault), and of the codes answered otherwise than
// their kind. A test checks it against fault.Kinds.
var wire = fault.Table[answer]{
	Kinds: map[fault.Kind]answer{
		fault.Internal:           {code: connect.CodeInternal, status: http.StatusInternalServerError},
		fault.InvalidArgument:    {code: connect.CodeInvalidArgument, status: http.StatusBadRequest},
		fault.NotFound:           {code: connect.CodeNotFound, status: http.StatusNotFound},
		fault.AlreadyExists:      {code: connect.CodeAlreadyExists, status: http.StatusConflict},
		fault.FailedPrecondition: {code: connect.CodeFailedPrecondition, status: http.StatusConflict},
		fault.Unavailable:        {code: connect.CodeUnavailable, status: http.StatusServiceUnavailable},
		fault.ResourceExhausted:  {code: connect.CodeResourceExhausted, status: http.StatusTooManyRequests},
		fault.Unimplemented:      {code: connect.CodeUnimplemented, status: http.StatusNotImplemented},
		fault.Unauthenticated:    {code: connect.CodeUnauthenticated, status: http.StatusUnauthorized},
		fault.PermissionDenied:   {code: connect.CodePermissionDenied, status: http.StatusForbidden},
		// The sandbox went: E2B's SDKs read unavailable, and 502 over
		// HTTP, as "the sandbox is not running".
		fault.Gone:             {code: connect.CodeUnavailable, status: http.StatusBadGateway},
		fault.Canceled:         {code: connect.CodeCanceled, status: 499},
		fault.DeadlineExceeded: {code: connect.CodeDeadlineExceeded, status: http.StatusGatewayTimeout},
	},
	Codes: map[string]answer{
		// A full disk: E2B's SDKs read 507 as "not enough space".
		"payload_too_large": {code: connect.CodeResourceExhausted, status: http.StatusInsufficientStorage},
		// envd forgets a process once it ended: E2B's SDKs expect
		// not_found for it.
		"process_ended": {code: connect.CodeNotFound, status: http.StatusNotFound},
	},
}

// classify is envd's answer to err, by wire; an internal error's detail
// goes to log.
func classify(ctx context.Context, err error, log *slog.Logger) answer {
	f := fault.Of(err)
	if f.Kind == fault.Internal && log != nil {
		log.ErrorContext(ctx, "envd: internal error", "err", err)
	}
	a := wire.Answer(f)
	a.msg = f.Message
	return a
}

// refuse is the Connect error of a request envd refuses: kind k, saying
// msg.
func refuse(k fault.Kind, msg string) error {
	return classify(context.Background(), fault.New(k, msg), nil).connect()
}
