package stream

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

// WriteHeader sends the header of a streamed answer: 200, contentType,
// neither cached nor held back by a buffering proxy.
func WriteHeader(w http.ResponseWriter, contentType string) {
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
}

// SSE writes Server-Sent Events to an HTTP answer, the one writer of
// /v1's event streams: an event is "id: N", "event: TYPE", "data: JSON"
// and a blank line (JSON holds no line break, so data is one line); a
// keep-alive is the comment ": keep-alive". The header (200,
// text/event-stream) goes with Begin, or else with the first event: until
// then nothing is written, so a stream that fails before its first event
// can still answer with its error's status. It implements Wire; it is not
// safe for concurrent use (one follower writes).
type SSE struct {
	w     http.ResponseWriter
	f     http.Flusher
	begun bool
}

// NewSSE returns the writer of w's events; false when w cannot stream (it
// cannot flush).
func NewSSE(w http.ResponseWriter) (*SSE, bool) {
	f, ok := w.(http.Flusher)
	if !ok {
		return nil, false
	}
	return &SSE{w: w, f: f}, true
}

// Begin sends the header now, before any event.
func (s *SSE) Begin() {
	s.begin()
	s.f.Flush()
}

func (s *SSE) begin() {
	if !s.begun {
		WriteHeader(s.w, "text/event-stream")
		s.begun = true
	}
}

// Begun reports whether the header went out.
func (s *SSE) Begun() bool { return s.begun }

// Event writes one event whose data is v in JSON; Flush sends it.
func (s *SSE) Event(id uint64, typ string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("event %s: %w", typ, err)
	}
	s.begin()
	_, err = fmt.Fprintf(s.w, "id: %d\nevent: %s\ndata: %s\n\n", id, typ, data)
	return err
}

// KeepAlive writes a keep-alive comment once the stream has begun (before
// that, it would send the header: a keep-alive does not decide the
// answer's status).
func (s *SSE) KeepAlive() error {
	if !s.begun {
		return nil
	}
	_, err := io.WriteString(s.w, ": keep-alive\n\n")
	return err
}

// Flush sends what was written (nothing before the stream has begun).
func (s *SSE) Flush() error {
	if s.begun {
		s.f.Flush()
	}
	return nil
}

var _ Wire = (*SSE)(nil)
