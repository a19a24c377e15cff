package interp

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/e2b/target"
	"github.com/corralhq/corral/internal/fault"
	"github.com/corralhq/corral/internal/kernel"
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
	if len(req.Code) > kernel.MaxCodeSize {
		refuse(w, fault.InvalidArgument, "the code is larger than 1 MiB")
		return
	}
	language := ""
	if req.ContextID == "" {
		var ok bool
		if language, ok = canonical(w, req.Language); !ok {
			return
		}
	}
	s := &stream{w: w}
	s.flusher, _ = w.(http.Flusher)
	stop := s.keepAlive(h.keepAlive)
	err := h.run(r, t, req, language, s)
	stop()
	switch {
	case err == nil:
	case r.Context().Err() != nil:
		// The client left (the SDK's timeout): the cell was interrupted.
	case !s.begun():
		h.writeError(w, err)
	default:
		_, msg := h.classify(err)
		s.line(map[string]any{"type": sandbox.ContextEventError, "name": "InterpreterError", "value": msg, "traceback": msg})
		s.line(map[string]any{"type": sandbox.ContextEventEndOfExecution})
	}
}

// run runs the request's cell, sending its events to s. A default
// context found gone (deleted by the client, or lost with its sandbox) is
// made again once, before any of the cell's events went out.
func (h *handler) run(r *http.Request, t target.Target, req executeRequest, language string, s *stream) error {
	emit := func(ev sandbox.ContextEvent) { s.event(ev) }
	if req.ContextID != "" {
		k, err := h.contexts(r.Context(), t)
		if err != nil {
			return err
		}
		return k.Run(r.Context(), req.ContextID, req.Code, 0, emit)
	}
	for attempt := 0; ; attempt++ {
		d, id, err := h.defaultContext(r.Context(), t, language)
		if err != nil {
			return err
		}
		k, err := h.contexts(r.Context(), t)
		if err != nil {
			return err
		}
		err = k.Run(r.Context(), id, req.Code, 0, emit)
		if !errors.Is(err, kernel.ErrNotFound) || s.events() > 0 || attempt > 0 {
			return err
		}
		d.forget(id)
	}
}

// stream writes a cell's events as newline-delimited JSON. Events come
// from the run's goroutine, keepalives from a ticker's: mu orders them.
type stream struct {
	w       http.ResponseWriter
	flusher http.Flusher

	mu     sync.Mutex
	header bool // the 200 and its headers went out
	n      int  // the cell's events sent
	failed bool // a write failed: the client is gone
}

// keepAlive sends a keepalive line every interval until the returned
// function is called; the first also sends the header, so that a cell
// waiting for its context's turn does not hold the SDK's request past its
// timeout. The returned function returns once the ticker's goroutine has
// ended.
func (s *stream) keepAlive(every time.Duration) func() {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				s.line(map[string]any{"type": "keepalive"})
			case <-done:
				return
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}

func (s *stream) begun() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.header
}

func (s *stream) events() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

func (s *stream) event(ev sandbox.ContextEvent) {
	s.mu.Lock()
	s.n++
	s.mu.Unlock()
	// number_of_executions comes first and is shown by nothing until the
	// cell ends: it goes out with what follows it, one packet fewer for
	// every cell.
	s.write(wireEvent(ev), ev.Type != sandbox.ContextEventNumberOfExecutions)
}

// line writes v as one JSON line and sends it.
func (s *stream) line(v any) { s.write(v, true) }

// write writes v as one JSON line, the header first if it has not gone,
// and sends it at once if flush.
func (s *stream) write(v any, flush bool) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf) // Encode ends the line with '\n'
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return // every value here is made of strings, numbers and maps
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed {
		return
	}
	if !s.header {
		h := s.w.Header()
		h.Set("Content-Type", "application/x-ndjson")
		h.Set("Cache-Control", "no-store")
		h.Set("X-Accel-Buffering", "no")
		s.w.WriteHeader(http.StatusOK)
		s.header = true
	}
	if _, err := s.w.Write(buf.Bytes()); err != nil {
		s.failed = true
		return
	}
	if flush && s.flusher != nil {
		s.flusher.Flush()
	}
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
