package interp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/corralhq/corral/internal/e2b/target"
	"github.com/corralhq/corral/internal/fault"
	"github.com/corralhq/corral/internal/kernel"
	"github.com/corralhq/corral/internal/stream"
	"github.com/corralhq/corral/sandbox"
)

// executeRequest is POST /execute's body.
type executeRequest struct {
	Code      string            `json:"code"`
	ContextID string            `json:"context_id"`
	Language  string            `json:"language"`
	EnvVars   map[string]string `json:"env_vars"`
}

// resultFields maps a MIME type of a result's bundle to the field the SDK
// reads it from. Other types go out as fields named by their MIME type,
// which the SDK collects in Result.extra.
var resultFields = map[string]string{
	"text/plain":             "text",
	"text/html":              "html",
	"text/markdown":          "markdown",
	"image/svg+xml":          "svg",
	"image/png":              "png",
	"image/jpeg":             "jpeg",
	"application/pdf":        "pdf",
	"text/latex":             "latex",
	"application/json":       "json",
	"application/javascript": "javascript",
}

// execute runs a cell: in the context the request names, else in the
// sandbox's default context of its language (python if none), made at
// the first such cell. The answer is 200 and newline-delimited JSON, one
// event per line, the last end_of_execution; a cell that cannot start is
// answered with E2B's error body and status instead (404 for an unknown
// context). The cell has no timeout of its own: the SDK bounds it and
// closes the request, which interrupts it.
func (h *handler) execute(w http.ResponseWriter, r *http.Request, t target.Target) {
	var req executeRequest
	if !decode(w, r, &req) {
		return
	}
	if req.ContextID != "" && req.Language != "" {
		refuse(w, fault.InvalidArgument, "provide context_id or language, not both")
		return
	}
	if len(req.EnvVars) > 0 {
		refuse(w, fault.InvalidArgument, "env_vars per cell are not supported: create a context (or set the sandbox's envs) instead")
		return
	}
	if err := kernel.CheckCode(req.Code); err != nil {
		h.writeError(w, err)
		return
	}
	language := ""
	if req.ContextID == "" {
		var ok bool
		if language, ok = canonical(w, req.Language); !ok {
			return
		}
	}
	out := &lines{w: w}
	out.flusher, _ = w.(http.Flusher)
	err := stream.Produce(r.Context(), runBacklog, func(ctx context.Context, emit func(sandbox.ContextEvent)) error {
		return h.run(ctx, t, req, language, emit)
	}, out, out.event, h.keepAlive)
	switch {
	case err == nil:
	case r.Context().Err() != nil, errors.Is(err, stream.ErrWrite):
		// The client left (the SDK's timeout): the cell was interrupted.
	case !out.begun:
		h.writeError(w, err)
	default:
		_, msg := h.classify(err)
		_ = out.line(map[string]any{"type": sandbox.ContextEventError, "name": "InterpreterError", "value": msg, "traceback": msg}, false)
		_ = out.line(map[string]any{"type": sandbox.ContextEventEndOfExecution}, false)
		_ = out.Flush()
	}
}

// runBacklog bounds the events of a cell held for a slow client; beyond
// it the cell waits.
const runBacklog = 64

// run runs the request's cell, emitting its events. A default context
// found gone (deleted by the client, or lost with its sandbox) is made
// again once, before any of the cell's events went out.
func (h *handler) run(ctx context.Context, t target.Target, req executeRequest, language string, emit func(sandbox.ContextEvent)) error {
	if req.ContextID != "" {
		k, err := h.contexts(ctx, t)
		if err != nil {
			return err
		}
		return k.Run(ctx, req.ContextID, req.Code, 0, emit)
	}
	emitted := 0
	counted := func(ev sandbox.ContextEvent) {
		emitted++
		emit(ev)
	}
	for attempt := 0; ; attempt++ {
		d, id, err := h.defaultContext(ctx, t, language)
		if err != nil {
			return err
		}
		k, err := h.contexts(ctx, t)
		if err != nil {
			return err
		}
		err = k.Run(ctx, id, req.Code, 0, counted)
		if !errors.Is(err, kernel.ErrNotFound) || emitted > 0 || attempt > 0 {
			return err
		}
		d.forget(id)
	}
}

// lines is the code interpreter's wire: newline-delimited JSON, one value
// a line. The header (200) goes with the first line, a keepalive's
// included, so that a cell waiting for its context's turn does not hold
// the SDK's request past its timeout. It is written by one follower.
type lines struct {
	w       http.ResponseWriter
	flusher http.Flusher // nil: w cannot flush

	begun bool // the 200 and its headers went out
	// held is set while the last line written waits for the next before
	// it is sent.
	held bool
}

// event writes one of the cell's events. number_of_executions comes
// first and is shown by nothing until the cell ends: it goes out with
// what follows it, one packet fewer for every cell.
func (l *lines) event(ev sandbox.ContextEvent) error {
	return l.line(wireEvent(ev), ev.Type == sandbox.ContextEventNumberOfExecutions)
}

// KeepAlive implements stream.Wire.
func (l *lines) KeepAlive() error { return l.line(map[string]any{"type": "keepalive"}, false) }

// Flush implements stream.Wire: it sends what was written, unless the
// last line waits for the next.
func (l *lines) Flush() error {
	if !l.held && l.flusher != nil {
		l.flusher.Flush()
	}
	return nil
}

// line writes v as one JSON line, the header first if it has not gone;
// hold keeps it back until the next line's Flush.
func (l *lines) line(v any, hold bool) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf) // Encode ends the line with '\n'
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("encode a line: %w", err)
	}
	if !l.begun {
		stream.WriteHeader(l.w, "application/x-ndjson")
		l.begun = true
	}
	l.held = hold
	_, err := l.w.Write(buf.Bytes())
	return err
}

// wireEvent is ev as the SDK reads it.
func wireEvent(ev sandbox.ContextEvent) map[string]any {
	out := map[string]any{"type": ev.Type}
	switch ev.Type {
	case sandbox.ContextEventStdout, sandbox.ContextEventStderr:
		out["text"] = ev.Text
	case sandbox.ContextEventResult:
		for mime, data := range ev.Data {
			field, ok := resultFields[mime]
			if !ok {
				field = mime
			}
			if json.Valid([]byte(data)) && (field == "json" || strings.HasSuffix(mime, "+json")) {
				out[field] = json.RawMessage(data)
			} else {
				out[field] = data
			}
		}
		out["is_main_result"] = ev.IsMain
	case sandbox.ContextEventError:
		out["name"] = ev.Name
		out["value"] = ev.Value
		out["traceback"] = traceback(ev.Traceback)
	case sandbox.ContextEventNumberOfExecutions:
		out["execution_count"] = ev.ExecutionCount
	}
	return out
}

// traceback joins a traceback's lines into the one string the SDK holds.
func traceback(lines []string) string {
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(l)
		if !strings.HasSuffix(l, "\n") {
			b.WriteByte('\n')
		}
	}
	return strings.TrimSuffix(b.String(), "\n")
}
