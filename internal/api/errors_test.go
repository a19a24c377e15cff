package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/corralhq/corral/internal/agent"
	"github.com/corralhq/corral/internal/cluster"
	"github.com/corralhq/corral/internal/engine"
	"github.com/corralhq/corral/internal/httpbody"
	"github.com/corralhq/corral/internal/kernel"
	"github.com/corralhq/corral/internal/live"
	"github.com/corralhq/corral/internal/node"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/validate"
	"github.com/corralhq/corral/internal/workspace"
)

// TestAgentErrorsByKind: a session file operation the agent refused is
// answered by the kind of the refusal, in words written for the client;
// the agent's own message, which comes from inside the sandbox, never
// reaches the answer.
func TestAgentErrorsByKind(t *testing.T) {
	const secret = "agent-words-7f3a"
	cases := []struct {
		kind   agent.Kind
		status int
		code   string
	}{
		{"ENOENT", http.StatusNotFound, "not_found"},
		{"ENOSPC", http.StatusRequestEntityTooLarge, "payload_too_large"},
		{"EDQUOT", http.StatusRequestEntityTooLarge, "payload_too_large"},
		{"ENOTDIR", http.StatusBadRequest, "invalid_request"},
		{"EISDIR", http.StatusBadRequest, "invalid_request"},
		{"EEXIST", http.StatusBadRequest, "invalid_request"},
		{"ENAMETOOLONG", http.StatusBadRequest, "invalid_request"},
		{"EACCES", http.StatusBadRequest, "invalid_request"},
		{"EPERM", http.StatusBadRequest, "invalid_request"},
		{agent.KindNotRegular, http.StatusBadRequest, "invalid_request"},
		{agent.KindSymlink, http.StatusBadRequest, "invalid_request"},
		{agent.KindInvalid, http.StatusBadRequest, "invalid_request"},
		{"EIO", http.StatusInternalServerError, "internal"},
		{agent.KindZygote, http.StatusInternalServerError, "internal"},
		{agent.KindInternal, http.StatusInternalServerError, "internal"},
		{"EWHATEVER", http.StatusInternalServerError, "internal"},
	}
	for _, c := range cases {
		t.Run(string(c.kind), func(t *testing.T) {
			var logged strings.Builder
			log := slog.New(slog.NewTextHandler(&logged, nil))
			err := fmt.Errorf("session file: %w", &agent.RemoteError{Kind: c.kind, Message: "open /workspace/x: " + secret})
			e := asError(t.Context(), err, log)
			if e.Status != c.status || e.Code != c.code {
				t.Errorf("%d %s, want %d %s", e.Status, e.Code, c.status, c.code)
			}
			if strings.Contains(e.Message, secret) || strings.Contains(e.Field, secret) || e.Message == "" {
				t.Errorf("message %q: the agent's words, or none", e.Message)
			}
			if c.status == http.StatusInternalServerError && !strings.Contains(logged.String(), secret) {
				t.Errorf("an internal error's detail is not logged: %q", logged.String())
			}
		})
	}
}

// TestSessionErrors: the session package's own refusals keep their words,
// which it writes for the caller.
func TestSessionErrors(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	if e := asError(t.Context(), fmt.Errorf("touch: %w", workspace.Invalid("ttl_seconds must be between 1 and %d", 86400)), log); e.Status != 400 || e.Message != "ttl_seconds must be between 1 and 86400" {
		t.Errorf("invalid: %+v", e)
	}
	if e := asError(t.Context(), live.ErrNotFound, log); e.Status != 404 || !strings.HasPrefix(e.Message, "no such sandbox or session") {
		t.Errorf("not found: %+v", e)
	}
	if e := asError(t.Context(), errors.New("disk image: "+"runc said something"), log); e.Status != 500 || strings.Contains(e.Message, "runc") {
		t.Errorf("other: %+v", e)
	}
}

// TestSandboxErrors: each refusal of a live sandbox has its own status and
// code; a missing process is told apart from a missing sandbox.
func TestSandboxErrors(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	for _, c := range []struct {
		err    error
		status int
		code   string
	}{
		{fmt.Errorf("process 7: %w", live.ErrNoProcess), 404, "not_found"},
		{live.ErrExists, 409, "conflict"},
		{live.ErrTooMany, 429, "too_many_processes"},
		{live.ErrNoStdin, 409, "no_stdin"},
		{fmt.Errorf("write stdin: %w", &live.NotReadingError{Written: 5, Stall: time.Second}), 429, "process_not_reading"},
		{live.ErrEnded, 409, "process_ended"},
		{fmt.Errorf("%w: a PTY", live.ErrUnsupported), 501, "not_implemented"},
		{fmt.Errorf("start: %w", agent.ErrLost), 503, "sandbox_restarting"},
		{live.ErrPaused, 409, "sandbox_paused"},
		{live.ErrNotPaused, 409, "not_paused"},
		{live.ErrNoTerminal, 409, "no_terminal"},
		{fmt.Errorf("wrapped: %w", live.ErrElsewhere), 503, "session_unavailable"},
		{fmt.Errorf("context %q: %w", "c1", kernel.ErrNotFound), 404, "not_found"},
		{kernel.ErrClosed, 404, "not_found"},
		{fmt.Errorf("start a python context: %w: %w", kernel.ErrInvalid, &agent.RemoteError{Message: "agent words"}), 400, "invalid_request"},
	} {
		e := asError(t.Context(), c.err, log)
		if e.Status != c.status || e.Code != c.code {
			t.Errorf("%v: %d %s, want %d %s", c.err, e.Status, e.Code, c.status, c.code)
		}
	}
	if e := asError(t.Context(), fmt.Errorf("process 7: %w", live.ErrNoProcess), log); !strings.Contains(e.Message, "process") {
		t.Errorf("a missing process: %q", e.Message)
	}
	if e := asError(t.Context(), fmt.Errorf("%w: %w", kernel.ErrInvalid, &agent.RemoteError{Message: "agent words"}), log); strings.Contains(e.Message, "agent words") {
		t.Errorf("an invalid context request shows the agent's words: %q", e.Message)
	}
}

// TestTable: /v1's table answers every kind of internal/fault (the list
// it is checked against), and the sentinels of the tree with their codes,
// fields and retries as /v1 has answered them.
func TestTable(t *testing.T) {
	if err := v1.Check(); err != nil {
		t.Fatalf("/v1's error table: %v", err)
	}
	log := slog.New(slog.DiscardHandler)
	for _, c := range []struct {
		err        error
		status     int
		code       string
		field      string
		retryAfter int
	}{
		{node.ErrNotFound, 404, "not_found", "", 0},
		{fmt.Errorf("submit: %w", node.ErrConflict), 409, "conflict", "execution_id", 0},
		{node.ErrQueueFull, 429, "queue_full", "", 1},
		{fmt.Errorf("get: %w: %w", store.ErrUnavailable, errors.New("dial tcp")), 503, "unavailable", "", 1},
		{&engine.TierPendingError{Tier: "gvisor", Reason: "requested"}, 503, "tier_unavailable", "", 30},
		{validate.Refuse("limits.memory_mb", "is too large"), 400, "invalid_request", "limits.memory_mb", 0},
		{&cluster.OwnerError{ID: "s1", Node: "n2"}, 503, "session_unavailable", "session_id", 2},
		{&cluster.OwnerError{ID: "s1", Node: "n2", Lost: true}, 410, "session_lost", "session_id", 0},
		{(&cluster.OwnerError{ID: "b1", Node: "n2", Lost: true}).FaultAs("sandbox"), 410, "sandbox_lost", "sandbox_id", 0},
		{live.ErrExists, 409, "conflict", "sandbox_id", 0},
		{context.Canceled, 499, "canceled", "", 0},
		{httpbody.TooLarge(10), 413, "payload_too_large", "", 0},
		{fmt.Errorf("write stdin: %w: %w", httpbody.ErrIncomplete, io.ErrUnexpectedEOF), 400, "invalid_request", "", 0},
		{httpbody.ErrJSON, 400, "invalid_json", "", 0},
	} {
		e := asError(t.Context(), c.err, log)
		if e.Status != c.status || e.Code != c.code || e.Field != c.field || e.RetryAfter != c.retryAfter || e.Message == "" {
			t.Errorf("%v: %+v, want %d %s field %q retry %d", c.err, e, c.status, c.code, c.field, c.retryAfter)
		}
	}
	if e := asError(t.Context(), &engine.TierPendingError{Tier: "gvisor", Reason: "auto: untrusted"}, log); !strings.Contains(e.Message, "auto: untrusted") {
		t.Errorf("tier_unavailable does not say why the tier was chosen: %q", e.Message)
	}
}

// unwrapper is a handler's own writer around instrument's.
type unwrapper struct{ http.ResponseWriter }

func (u unwrapper) Unwrap() http.ResponseWriter { return u.ResponseWriter }

// TestErrorTraceID: an error answered for a traced request names its
// trace, also through a writer wrapped around instrument's; an untraced
// one names none; a shared answer is left as it was.
func TestErrorTraceID(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{0xab, 1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled})
	shared := notFound("no such thing")
	for _, c := range []struct {
		name string
		w    func(http.ResponseWriter) http.ResponseWriter
		want string
	}{
		{"traced", func(w http.ResponseWriter) http.ResponseWriter { return &statusWriter{ResponseWriter: w, span: sc} }, sc.TraceID().String()},
		{"traced, wrapped", func(w http.ResponseWriter) http.ResponseWriter {
			return unwrapper{&statusWriter{ResponseWriter: w, span: sc}}
		}, sc.TraceID().String()},
		{"untraced", func(w http.ResponseWriter) http.ResponseWriter { return &statusWriter{ResponseWriter: w} }, ""},
		{"outside instrument", func(w http.ResponseWriter) http.ResponseWriter { return w }, ""},
	} {
		rec := httptest.NewRecorder()
		writeError(c.w(rec), shared)
		var body struct {
			Error map[string]any `json:"error"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got, named := body.Error["trace_id"]
		if c.want == "" && named || c.want != "" && got != c.want {
			t.Errorf("%s: %s, want trace_id %q", c.name, rec.Body.String(), c.want)
		}
	}
	if shared.TraceID != "" {
		t.Errorf("the shared answer was changed: %+v", shared)
	}
}
