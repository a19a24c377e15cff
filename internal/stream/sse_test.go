package stream

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestSSE: the format of events and keep-alives, the header with Begin.
func TestSSE(t *testing.T) {
	rec := httptest.NewRecorder()
	sse, ok := NewSSE(rec)
	if !ok {
		t.Fatal("a recorder can flush")
	}
	sse.Begin()
	if !rec.Flushed || rec.Code != http.StatusOK {
		t.Fatalf("Begin: flushed %v, status %d", rec.Flushed, rec.Code)
	}
	l := newLog("a<b", "c")
	l.end()
	err := Follow(t.Context(), Log(l.read, seqOf, 0), sse, func(e event) error {
		return sse.Event(e.seq, "out", map[string]string{"text": e.name})
	}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := sse.KeepAlive(); err != nil {
		t.Fatal(err)
	}
	want := "id: 1\nevent: out\ndata: {\"text\":\"a\\u003cb\"}\n\n" +
		"id: 2\nevent: out\ndata: {\"text\":\"c\"}\n\n" +
		": keep-alive\n\n"
	if got := rec.Body.String(); got != want {
		t.Errorf("body %q, want %q", got, want)
	}
	h := rec.Header()
	if h.Get("Content-Type") != "text/event-stream" || h.Get("Cache-Control") != "no-store" || h.Get("X-Accel-Buffering") != "no" {
		t.Errorf("header %v", h)
	}
}

// TestSSEHeaderWithFirstEvent: without Begin, nothing is written (not even
// keep-alives) until the first event, so a stream that fails before it
// still answers with an error's status; the first event sends the header.
func TestSSEHeaderWithFirstEvent(t *testing.T) {
	boom := errors.New("cannot start")
	rec := httptest.NewRecorder()
	sse, _ := NewSSE(rec)
	err := Produce(t.Context(), 4, func(ctx context.Context, emit func(event)) error {
		time.Sleep(20 * time.Millisecond) // silent for a few keep-alive intervals
		return boom
	}, sse, func(e event) error { return sse.Event(e.seq, e.name, e.name) }, time.Millisecond)
	if !errors.Is(err, boom) || sse.Begun() {
		t.Fatalf("Produce: %v, begun %v", err, sse.Begun())
	}
	if rec.Body.Len() != 0 || rec.Flushed || rec.Header().Get("Content-Type") != "" {
		t.Fatalf("written before the first event: %q, flushed %v, header %v", rec.Body, rec.Flushed, rec.Header())
	}
	http.Error(rec, "no such context", http.StatusNotFound)
	if rec.Code != http.StatusNotFound {
		t.Errorf("status %d after a failed start", rec.Code)
	}

	rec = httptest.NewRecorder()
	sse, _ = NewSSE(rec)
	err = Produce(t.Context(), 4, func(ctx context.Context, emit func(event)) error {
		emit(event{1, "start"})
		return boom
	}, sse, func(e event) error { return sse.Event(e.seq, e.name, e.name) }, time.Hour)
	if !errors.Is(err, boom) || !sse.Begun() || rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "text/event-stream" {
		t.Fatalf("Produce: %v; begun %v, status %d, header %v", err, sse.Begun(), rec.Code, rec.Header())
	}
	if got, want := rec.Body.String(), "id: 1\nevent: start\ndata: \"start\"\n\n"; got != want {
		t.Errorf("body %q, want %q", got, want)
	}
}

// noFlush is a ResponseWriter that cannot stream.
type noFlush struct{ http.ResponseWriter }

func TestSSENeedsFlusher(t *testing.T) {
	if _, ok := NewSSE(noFlush{httptest.NewRecorder()}); ok {
		t.Error("NewSSE took a writer that cannot flush")
	}
}
