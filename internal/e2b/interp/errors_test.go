package interp

import (
	"fmt"
	"log/slog"
	"net/http"
	"testing"

	"github.com/corralhq/corral/internal/e2b/target"
	"github.com/corralhq/corral/internal/kernel"
	"github.com/corralhq/corral/internal/live"
)

// TestClassify: the SDK reads 404 as NotFoundError and 502 as the sandbox
// gone.
func TestClassify(t *testing.T) {
	h := &handler{log: slog.New(slog.DiscardHandler)}
	for _, c := range []struct {
		err    error
		status int
	}{
		{fmt.Errorf("context %q: %w", "c1", kernel.ErrNotFound), http.StatusNotFound},
		{fmt.Errorf("%w: %w", target.ErrGone, kernel.ErrClosed), http.StatusBadGateway},
		{fmt.Errorf("%w: %w", target.ErrGone, live.ErrNotFound), http.StatusBadGateway},
		{kernel.ErrInvalid, http.StatusBadRequest},
		{live.ErrLost, http.StatusServiceUnavailable},
		{live.ErrElsewhere, http.StatusServiceUnavailable},
		{fmt.Errorf("boom"), http.StatusInternalServerError},
	} {
		if status, msg := h.classify(c.err); status != c.status || msg == "" {
			t.Errorf("%v: %d %q, want %d", c.err, status, msg, c.status)
		}
	}
}
