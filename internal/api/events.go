package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/corralhq/corral/internal/state"
	"github.com/corralhq/corral/internal/stream"
	"github.com/corralhq/corral/internal/validate"
)

// keepAlive is how long an event stream stays silent before it gets a
// comment line, so proxies do not cut it.
const keepAlive = 15 * time.Second

// eventStream returns the writer of w's Server-Sent Events, or answers
// that w cannot stream.
func eventStream(w http.ResponseWriter) (*stream.SSE, bool) {
	sse, ok := stream.NewSSE(w)
	if !ok {
		writeError(w, internalError("streaming unsupported"))
	}
	return sse, ok
}

// resumedStream begins the event stream of a client that resumes after
// event Last-Event-ID (or ?last_event_id; none: from the start), or
// answers why it cannot.
func resumedStream(w http.ResponseWriter, r *http.Request) (*stream.SSE, uint64, bool) {
	after, e := lastEventID(r)
	if e != nil {
		writeError(w, e)
		return nil, 0, false
	}
	sse, ok := eventStream(w)
	if !ok {
		return nil, 0, false
	}
	sse.Begin()
	return sse, after, true
}

// events streams an execution's output and status as Server-Sent Events:
// "id: N", "event: stdout|stderr|status|notice|done", "data: <JSON>". A client
// that reconnects with Last-Event-ID gets what came after that id. The
// stream ends after the done event, whose data is the final record.
func (s *Server) events(w http.ResponseWriter, r *http.Request, t *Tenant) {
	id := r.PathValue("id")
	if !validate.ValidID(id) {
		writeError(w, errNotFound())
		return
	}
	// Another tenant's execution is not found, not forbidden.
	if _, err := s.node.Get(r.Context(), t.Name, id); err != nil {
		writeError(w, asError(r.Context(), err, s.log))
		return
	}
	sse, after, ok := resumedStream(w, r)
	if !ok {
		return
	}
	log := &executionLog{s: s, tenant: t.Name, id: id, after: after}
	err := stream.Follow(r.Context(), log, sse, func(ev state.Event) error {
		return sse.Event(ev.ID, ev.Type, eventData(ev))
	}, keepAlive)
	if err != nil && r.Context().Err() == nil && !errors.Is(err, stream.ErrWrite) {
		s.log.WarnContext(r.Context(), "read events", "execution_id", id, "err", err)
	}
}

// eventData is an execution event's data as the stream says it.
func eventData(ev state.Event) any {
	switch ev.Type {
	case state.EventStdout, state.EventStderr:
		return map[string]string{"text": strings.ToValidUTF8(string(ev.Data), "\uFFFD")}
	case state.EventStatus:
		return map[string]string{"status": string(ev.Data)}
	case state.EventNotice:
		return map[string]string{"message": string(ev.Data)}
	}
	return json.RawMessage(ev.Data) // done: the final record
}

// executionLog is an execution's event log (state) as a stream's source,
// from the events after after to the done event.
type executionLog struct {
	s          *Server
	tenant, id string
	after      uint64
	done       bool // the done event went
}

func (x *executionLog) Next(ctx context.Context, wait time.Duration) ([]state.Event, error) {
	if x.done {
		return nil, io.EOF
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	evs, err := x.s.node.Events(wctx, x.tenant, x.id, x.after, true)
	cancel()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if errors.Is(err, context.DeadlineExceeded) || (err == nil && len(evs) == 0) {
		// Nothing new. A finished execution whose log has expired still
		// gets its done event.
		cur, gerr := x.s.node.Get(ctx, x.tenant, x.id)
		if gerr != nil || !cur.Status.Final() {
			return nil, nil
		}
		b, err := json.Marshal(cur)
		if err != nil {
			return nil, err
		}
		x.done = true
		return []state.Event{{ID: x.after + 1, Type: state.EventDone, Data: b}}, nil
	}
	if err != nil {
		return nil, err
	}
	for i, ev := range evs {
		x.after = ev.ID
		if ev.Type == state.EventDone {
			x.done = true
			return evs[:i+1], nil
		}
	}
	return evs, nil
}

// lastEventID reads where a client resumes a stream.
func lastEventID(r *http.Request) (uint64, *Error) {
	last := r.Header.Get("Last-Event-ID")
	if last == "" {
		last = r.URL.Query().Get("last_event_id")
	}
	if last == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(strings.TrimSpace(last), 10, 64)
	if err != nil {
		return 0, refuse("Last-Event-ID", "must be an event id")
	}
	return n, nil
}
