package interp

import (
	"errors"
	"net/http"

	"github.com/corralhq/corral/internal/cluster"
	"github.com/corralhq/corral/internal/e2b/target"
	"github.com/corralhq/corral/internal/engine"
	"github.com/corralhq/corral/internal/kernel"
	"github.com/corralhq/corral/internal/live"
)

// classify maps an error of the live sandboxes to the status and message the
// SDK gets. It is this package's only such mapping; it sorts by the kind
// of error alone (the classes internal/api/errors.go answers for /v1), so
// no text from the sandbox's agent or runtime reaches a client. The SDK
// reads 404 as NotFoundError and 502 as TimeoutError ("the sandbox timed
// out"), as E2B's own edge answers for a sandbox that is gone.
func (h *handler) classify(err error) (int, string) {
	var ie *engine.InputError
	var se *cluster.OwnerError
	var pe *engine.TierPendingError
	switch {
	case errors.Is(err, kernel.ErrNotFound):
		return http.StatusNotFound, "no such code context in the sandbox (a sandbox made again after it ended has lost its contexts)"
	case errors.Is(err, kernel.ErrInvalid):
		return http.StatusBadRequest, "the context request is invalid: a language without code contexts (python, javascript and bash have them), " +
			"a working directory that is not an absolute clean path or does not exist in the sandbox, or code over 1 MiB"
	case errors.Is(err, kernel.ErrClosed), errors.Is(err, live.ErrNotFound):
		return http.StatusBadGateway, "the sandbox is not running (it reached its timeout or was killed)"
	case errors.As(err, &ie):
		return http.StatusBadRequest, ie.Error()
	case errors.Is(err, live.ErrLost):
		return http.StatusServiceUnavailable, "the sandbox ended during the call; it is made again on its disk at the next call (its contexts are lost); retry"
	case errors.As(err, &se), errors.Is(err, live.ErrElsewhere):
		return http.StatusServiceUnavailable, "the node owning the sandbox is not answering; retry"
	case errors.As(err, &pe):
		return http.StatusServiceUnavailable, "the sandbox's isolation tier is still being installed on this server; retry later"
	}
	h.log.Error("code interpreter: internal error", "err", err)
	return http.StatusInternalServerError, "internal error; retry"
}

// writeError answers err with E2B's error body.
func (h *handler) writeError(w http.ResponseWriter, err error) {
	status, msg := h.classify(err)
	target.WriteError(w, status, msg)
}
