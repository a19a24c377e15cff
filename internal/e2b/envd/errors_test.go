package envd

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/corralhq/corral/internal/agent"
	"github.com/corralhq/corral/internal/e2b/target"
	"github.com/corralhq/corral/internal/live"
)

// TestTable: envd's table answers every kind of internal/fault, each as
// E2B's SDKs read it.
func TestTable(t *testing.T) {
	if err := wire.Check(); err != nil {
		t.Fatalf("envd's error table: %v", err)
	}
	log := slog.New(slog.DiscardHandler)
	for _, c := range []struct {
		err    error
		code   connect.Code
		status int
	}{
		{fmt.Errorf("%w: %w", target.ErrGone, live.ErrNotFound), connect.CodeUnavailable, http.StatusBadGateway},
		{live.ErrNoProcess, connect.CodeNotFound, http.StatusNotFound},
		{live.ErrEnded, connect.CodeNotFound, http.StatusNotFound},
		{live.ErrNoStdin, connect.CodeFailedPrecondition, http.StatusConflict},
		{live.ErrTooMany, connect.CodeResourceExhausted, http.StatusTooManyRequests},
		{&live.NotReadingError{Written: 5, Stall: time.Second}, connect.CodeResourceExhausted, http.StatusTooManyRequests},
		{live.ErrLost, connect.CodeUnavailable, http.StatusServiceUnavailable},
		{&agent.RemoteError{Kind: "ENOSPC"}, connect.CodeResourceExhausted, http.StatusInsufficientStorage},
		{&agent.RemoteError{Kind: "EEXIST"}, connect.CodeAlreadyExists, http.StatusConflict},
		{&agent.RemoteError{Kind: "EACCES"}, connect.CodePermissionDenied, http.StatusForbidden},
		{&agent.RemoteError{Kind: "EXDEV"}, connect.CodeInvalidArgument, http.StatusBadRequest},
		{context.DeadlineExceeded, connect.CodeDeadlineExceeded, http.StatusGatewayTimeout},
		{fmt.Errorf("boom"), connect.CodeInternal, http.StatusInternalServerError},
	} {
		a := classify(t.Context(), c.err, log)
		if a.code != c.code || a.status != c.status || a.msg == "" {
			t.Errorf("%v: %v %d %q, want %v %d", c.err, a.code, a.status, a.msg, c.code, c.status)
		}
	}
}
