package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"
)

// TestProcessEventsResume: the events iterator decodes output bytes
// losslessly, resumes a broken stream after the last event it delivered
// (Last-Event-ID) and ends after the end event, each event once.
func TestProcessEventsResume(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if r.URL.Path != "/v1/sandboxes/box/processes/7/events" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		switch r.Header.Get("Last-Event-ID") {
		case "":
			fmt.Fprint(w, "id: 1\nevent: start\ndata: {\"seq\":1,\"type\":\"start\",\"pid\":7}\n\n")
			fmt.Fprint(w, ": keep-alive\n\n")
			fmt.Fprint(w, "id: 2\nevent: stdout\ndata: {\"seq\":2,\"type\":\"stdout\",\"data\":\"AP8K\",\"text\":\"\\ufffd\\ufffd\\n\"}\n\n")
			// The connection breaks here.
		case "2":
			fmt.Fprint(w, "id: 2\nevent: stdout\ndata: {\"seq\":2,\"type\":\"stdout\",\"data\":\"AP8K\"}\n\n") // a repeat is skipped
			fmt.Fprint(w, "id: 3\nevent: end\ndata: {\"seq\":3,\"type\":\"end\",\"exit\":{\"exit_code\":143,\"signal\":\"SIGTERM\",\"ended_at\":\"2026-01-02T03:04:05Z\",\"duration_ms\":5}}\n\n")
		default:
			t.Errorf("resumed after %q", r.Header.Get("Last-Event-ID"))
		}
	})
	p := f.client(2).Sandbox("box").Process(7)
	var got []ProcessEvent
	for ev, err := range p.Events(context.Background(), 0) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ev)
	}
	if len(got) != 3 || got[0].Type != ProcessEventStart || got[0].PID != 7 || got[2].Type != ProcessEventEnd {
		t.Fatalf("events %+v", got)
	}
	if !bytes.Equal(got[1].Data, []byte{0, 0xff, '\n'}) {
		t.Errorf("output bytes %q", got[1].Data)
	}
	if x := got[2].Exit; x == nil || x.ExitCode != 143 || x.Signal != "SIGTERM" {
		t.Errorf("end %+v", x)
	}
	if n := len(f.all()); n != 2 {
		t.Errorf("%d connections, want 2", n)
	}
}

// TestSandboxErrors: the answers of live sandbox calls match their
// sentinels; a refused start is not retried.
func TestSandboxErrors(t *testing.T) {
	for _, c := range []struct {
		status int
		code   string
		want   error
	}{
		{409, "process_ended", ErrProcessEnded},
		{429, "too_many_processes", ErrTooManyProcesses},
		{501, "not_implemented", ErrNotImplemented},
		{404, "not_found", ErrNotFound},
		{409, "conflict", ErrConflict},
	} {
		f := newFake(t, func(w http.ResponseWriter, r *http.Request, n int) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(c.status)
			fmt.Fprintf(w, `{"error":{"code":%q,"message":"m"}}`, c.code)
		})
		_, err := f.client(3).Sandbox("box").Start(context.Background(), StartProcessRequest{Cmd: []string{"true"}})
		if !errors.Is(err, c.want) {
			t.Errorf("%d %s: %v, want %v", c.status, c.code, err, c.want)
		}
		if c.code == "process_ended" && errors.Is(err, ErrTooManyProcesses) {
			t.Errorf("process_ended matches ErrTooManyProcesses")
		}
		if n := len(f.all()); n != 1 {
			t.Errorf("%d %s: %d attempts, want 1", c.status, c.code, n)
		}
	}
}

// TestSandboxMetrics: Metrics sends since and until as RFC 3339 (none when
// zero), reads the readings, and is retried as a read.
func TestSandboxMetrics(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		writeJSON(w, http.StatusOK, SandboxMetrics{Metrics: []SandboxMetric{{CPUCores: 1, CPUUsedPct: 12.5, MemoryUsedBytes: 3}}})
	})
	since := time.Date(2026, 1, 2, 3, 4, 5, 600, time.UTC)
	got, err := f.client(2).Sandbox("box").Metrics(context.Background(), since, time.Time{})
	if err != nil || len(got) != 1 || got[0].CPUUsedPct != 12.5 || got[0].MemoryUsedBytes != 3 {
		t.Fatalf("metrics %+v, %v", got, err)
	}
	reqs := f.all()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want a retry", len(reqs))
	}
	if r := reqs[1]; r.method != "GET" || r.path != "/v1/sandboxes/box/metrics" || r.query != "since=2026-01-02T03%3A04%3A05.0000006Z" {
		t.Errorf("sent %s %s?%s", r.method, r.path, r.query)
	}
}

// TestSnapshotsClient: ListSnapshots follows next_cursor to the last
// page, passing the sandbox filter on each; Fork is sent once, never
// retried, and its per-fork errors come back as results.
func TestSnapshotsClient(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/v1/snapshots" && r.URL.Query().Get("sandbox_id") != "box":
			t.Errorf("list without the filter: %s", r.URL)
		case r.URL.Path == "/v1/snapshots" && r.URL.Query().Get("cursor") == "":
			fmt.Fprint(w, `{"snapshots":[{"snapshot_id":"snap_b"}],"next_cursor":"1.snap_b"}`)
		case r.URL.Path == "/v1/snapshots" && r.URL.Query().Get("cursor") == "1.snap_b":
			fmt.Fprint(w, `{"snapshots":[{"snapshot_id":"snap_a"}]}`)
		case r.URL.Path == "/v1/sandboxes/box/fork":
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"error":{"code":"unavailable","message":"busy"}}`)
		default:
			t.Errorf("unexpected %s %s", r.Method, r.URL)
		}
	})
	c := f.client(3)
	list, err := c.ListSnapshots(context.Background(), "box")
	if err != nil || len(list) != 2 || list[0].SnapshotID != "snap_b" || list[1].SnapshotID != "snap_a" {
		t.Fatalf("list: %+v, %v", list, err)
	}
	before := len(f.all())
	if _, err := c.Sandbox("box").Fork(context.Background(), ForkRequest{Count: 2}); err == nil {
		t.Fatal("a fork answered 503 succeeded")
	}
	if n := len(f.all()) - before; n != 1 {
		t.Errorf("the fork was sent %d times, want once", n)
	}
}
