package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/corralhq/corral/internal/state"
	"github.com/corralhq/corral/internal/validate"
)

// keepAlive is how often an idle event stream gets a comment line, so
// proxies do not cut it.
const keepAlive = 15 * time.Second

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
		writeError(w, asError(err, s.log))
		return
	}
	after := uint64(0)
	last := r.Header.Get("Last-Event-ID")
	if last == "" {
		last = r.URL.Query().Get("last_event_id")
	}
	if last != "" {
		n, err := strconv.ParseUint(strings.TrimSpace(last), 10, 64)
		if err != nil {
			writeError(w, refuse("Last-Event-ID", "must be an event id"))
			return
		}
		after = n
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		writeError(w, internalError("streaming unsupported"))
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	flusher.Flush()

	for {
		ctx, cancel := context.WithTimeout(r.Context(), keepAlive)
		evs, err := s.node.Events(ctx, t.Name, id, after, true)
		cancel()
		if r.Context().Err() != nil {
			return
		}
		if errors.Is(err, context.DeadlineExceeded) || (err == nil && len(evs) == 0) {
			// Nothing new. A finished execution whose log has expired
			// still gets its done event.
			if cur, gerr := s.node.Get(r.Context(), t.Name, id); gerr == nil && cur.Status.Final() {
				if b, err := json.Marshal(cur); err == nil {
					writeEvent(w, after+1, state.EventDone, b)
					flusher.Flush()
				}
				return
			}
			fmt.Fprint(w, ": keep-alive\n\n")
			flusher.Flush()
			continue
		}
		if err != nil {
			s.log.Warn("read events", "execution_id", id, "err", err)
			return
		}
		for _, ev := range evs {
			data := ev.Data
			switch ev.Type {
			case state.EventStdout, state.EventStderr:
				data, _ = json.Marshal(map[string]string{"text": strings.ToValidUTF8(string(ev.Data), "\uFFFD")})
			case state.EventStatus:
				data, _ = json.Marshal(map[string]string{"status": string(ev.Data)})
			case state.EventNotice:
				data, _ = json.Marshal(map[string]string{"message": string(ev.Data)})
			}
			writeEvent(w, ev.ID, ev.Type, data)
			after = ev.ID
			if ev.Type == state.EventDone {
				flusher.Flush()
				return
			}
		}
		flusher.Flush()
	}
}

func writeEvent(w http.ResponseWriter, id uint64, typ string, data []byte) {
	fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", id, typ, data)
}
