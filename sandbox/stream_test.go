package sandbox

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// events is a fake execution's event log.
var events = []string{
	"id: 1\nevent: status\ndata: {\"status\":\"queued\"}\n\n",
	"id: 2\nevent: status\ndata: {\"status\":\"running\"}\n\n",
	"id: 3\nevent: stdout\ndata: {\"text\":\"line 0\\n\"}\n\n",
	": keep-alive\n\n",
	"id: 4\nevent: stderr\ndata: {\"text\":\"warn\\n\"}\n\n",
	"id: 5\nevent: stdout\ndata: {\"text\":\"line 1\\n\"}\n\n",
	"id: 6\nevent: done\ndata: {\"execution_id\":\"ex_s\",\"status\":\"success\",\"stdout\":\"line 0\\nline 1\\n\"}\n\n",
}

// sseServer serves the events after Last-Event-ID; the first connections
// break after cut[i] events.
func sseServer(t *testing.T, cut ...int) (*fake, *[]string) {
	var mu sync.Mutex
	var lastIDs []string
	conn := 0
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if r.URL.Path != "/v1/executions/ex_s/events" {
			apiError(w, 404, "not_found", "")
			return
		}
		mu.Lock()
		lastIDs = append(lastIDs, r.Header.Get("Last-Event-ID"))
		limit := len(events)
		if conn < len(cut) {
			limit = cut[conn]
		}
		conn++
		mu.Unlock()
		after, _ := strconv.Atoi(r.Header.Get("Last-Event-ID"))
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		sent := 0
		for _, ev := range events {
			if sent == limit {
				// Break the connection mid-stream, without a clean end.
				hj, _ := w.(http.Hijacker)
				c, _, _ := hj.Hijack()
				c.Close()
				return
			}
			if id, ok := strings.CutPrefix(strings.SplitN(ev, "\n", 2)[0], "id: "); ok {
				if n, _ := strconv.Atoi(id); n <= after {
					continue
				}
			}
			fmt.Fprint(w, ev)
			w.(http.Flusher).Flush()
			sent++
		}
	})
	return f, &lastIDs
}

func collect(t *testing.T, c *Client, opts StreamOptions) ([]Event, error) {
	var out []Event
	for ev, err := range c.Stream(t.Context(), "ex_s", opts) {
		if err != nil {
			return out, err
		}
		out = append(out, ev)
	}
	return out, nil
}

func TestStream(t *testing.T) {
	f, _ := sseServer(t)
	evs, err := collect(t, f.client(0), StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, e := range evs {
		types = append(types, string(e.Type))
	}
	if strings.Join(types, ",") != "status,status,stdout,stderr,stdout,done" {
		t.Fatalf("types %v", types)
	}
	if evs[0].Status != StatusQueued || evs[2].Text != "line 0\n" || evs[3].Text != "warn\n" || evs[5].ID != 6 ||
		evs[5].Result == nil || evs[5].Result.Stdout != "line 0\nline 1\n" {
		t.Errorf("events %+v", evs)
	}
	if got := f.all()[0].header.Get("Authorization"); got != "Bearer k" {
		t.Errorf("Authorization %q", got)
	}
}

// Broken connections are resumed from the last event: nothing lost or
// repeated.
func TestStreamResumes(t *testing.T) {
	f, lastIDs := sseServer(t, 2, 3)
	evs, err := collect(t, f.client(0), StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range evs {
		ids = append(ids, strconv.FormatUint(e.ID, 10))
	}
	if strings.Join(ids, ",") != "1,2,3,4,5,6" {
		t.Errorf("ids %v", ids)
	}
	if got := strings.Join(*lastIDs, ","); got != ",2,4" {
		t.Errorf("Last-Event-ID per connection %q, want \",2,4\"", got)
	}
}

func TestStreamAfter(t *testing.T) {
	f, lastIDs := sseServer(t)
	evs, err := collect(t, f.client(0), StreamOptions{After: 4})
	if err != nil || len(evs) != 2 || evs[0].ID != 5 {
		t.Fatalf("events %+v, %v", evs, err)
	}
	if (*lastIDs)[0] != "4" {
		t.Errorf("Last-Event-ID %q", (*lastIDs)[0])
	}
}

func TestStreamGivesUp(t *testing.T) {
	// Every connection breaks before any event: after the retries, a
	// transport error.
	f, _ := sseServer(t, 0, 0, 0, 0, 0, 0)
	_, err := collect(t, f.client(1), StreamOptions{})
	var te *TransportError
	if !errors.As(err, &te) {
		t.Fatalf("err %v (%T)", err, err)
	}
}

func TestStreamNotFound(t *testing.T) {
	f, _ := sseServer(t)
	var got error
	for _, err := range f.client(3).Stream(t.Context(), "nope", StreamOptions{}) {
		got = err
	}
	if !errors.Is(got, ErrNotFound) || len(f.all()) != 1 {
		t.Fatalf("err %v after %d requests", got, len(f.all()))
	}
}

// A silent connection is dropped after IdleTimeout and resumed.
func TestStreamIdleTimeout(t *testing.T) {
	var mu sync.Mutex
	conns := 0
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, n int) {
		mu.Lock()
		conns++
		first := conns == 1
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		fmt.Fprint(w, events[0])
		w.(http.Flusher).Flush()
		if first {
			<-r.Context().Done() // hang until the client gives up
			return
		}
		fmt.Fprint(w, events[6])
	})
	evs, err := collect(t, f.client(0), StreamOptions{IdleTimeout: 100 * time.Millisecond})
	if err != nil || len(evs) != 2 || evs[1].Type != EventDone {
		t.Fatalf("events %+v, %v", evs, err)
	}
	if got := f.all()[1].header.Get("Last-Event-ID"); got != "1" {
		t.Errorf("resumed with Last-Event-ID %q", got)
	}
}

// Stopping the loop early ends the stream without error.
func TestStreamBreak(t *testing.T) {
	f, _ := sseServer(t)
	n := 0
	for _, err := range f.client(0).Stream(t.Context(), "ex_s", StreamOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		n++
		if n == 2 {
			break
		}
	}
	if n != 2 {
		t.Errorf("%d events", n)
	}
}
