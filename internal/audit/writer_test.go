package audit_test

import (
	"bufio"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/corralhq/corral/internal/audit"
	"github.com/corralhq/corral/internal/metrics"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/store/sqlite"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
)

// count reads the counter of result.
func count(t *testing.T, v *prometheus.CounterVec, result string) float64 {
	t.Helper()
	var d dto.Metric
	if err := v.WithLabelValues(result).Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetCounter().GetValue()
}

func openStore(t *testing.T) *sqlite.DB {
	t.Helper()
	db, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "corral.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// TestWriter: events recorded are stored in order, chained, stamped with
// the node, and shipped to the sink as JSON lines with their hashes; Close
// writes what is queued.
func TestWriter(t *testing.T) {
	db := openStore(t)
	sinkPath := filepath.Join(t.TempDir(), "audit.jsonl")
	sink, err := audit.OpenSink(sinkPath)
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New()
	w := audit.NewWriter(db, audit.WriterConfig{Node: "n1", Batch: 7, Flush: time.Hour}, []audit.Sink{sink}, m.AuditEvents, nil)
	for i := range 50 {
		w.Record(audit.Event{Tenant: "acme", Action: audit.FileWrite, Fields: map[string]string{"i": string(rune('a' + i%26))}})
	}
	if err := w.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n, err := store.VerifyAudit(t.Context(), db, "acme", 0, 0); err != nil || n != 50 {
		t.Fatalf("VerifyAudit = %d, %v; want 50 events that hold", n, err)
	}
	es, _, err := db.ListAudit(t.Context(), "acme", store.AuditQuery{Limit: 1})
	if err != nil || len(es) != 1 || es[0].Node != "n1" || es[0].Time.IsZero() || es[0].Fields["i"] != "a" {
		t.Fatalf("first event %+v, %v", es, err)
	}
	f, err := os.Open(sinkPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []sandbox.AuditEvent
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e sandbox.AuditEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("sink line %q: %v", sc.Text(), err)
		}
		lines = append(lines, e)
	}
	if len(lines) != 50 || lines[49].Seq != 50 || lines[49].Hash != audit.Hash(&lines[49]) {
		t.Fatalf("sink has %d lines, last %+v", len(lines), lines[len(lines)-1])
	}
	if got := count(t, m.AuditEvents, "written"); got != 50 {
		t.Errorf("written %v", got)
	}
	if got := count(t, m.AuditEvents, "shipped"); got != 50 {
		t.Errorf("shipped %v", got)
	}
}

// TestWriterDrops: with the store gone, the writer holds its batch and the
// bounded queue fills; what does not fit is dropped, counted and logged,
// never silently; every event is written or counted as dropped.
func TestWriterDrops(t *testing.T) {
	db := openStore(t)
	db.Close() // every append now fails, as a store that is down
	m := metrics.New()
	logs := &testenv.LogBuffer{}
	w := audit.NewWriter(db, audit.WriterConfig{Queue: 4, Batch: 2, Flush: time.Millisecond, Retry: time.Hour},
		nil, m.AuditEvents, slog.New(slog.NewTextHandler(logs, nil)))
	const n = 40
	for range n {
		w.Record(audit.Event{Tenant: "acme", Action: audit.ProcessStart})
		time.Sleep(time.Millisecond)
	}
	if err := w.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	dropped := count(t, m.AuditEvents, "dropped")
	written := count(t, m.AuditEvents, "written")
	if written != 0 || dropped != n {
		t.Errorf("written %v, dropped %v; want 0 and %d", written, dropped, n)
	}
	if !strings.Contains(logs.String(), "audit events dropped") || !strings.Contains(logs.String(), "queue is full") {
		t.Errorf("the drops were not logged:\n%s", logs)
	}
	w.Record(audit.Event{Tenant: "acme", Action: audit.ProcessStart}) // after Close: dropped, counted
	if got := count(t, m.AuditEvents, "dropped"); got != n+1 {
		t.Errorf("a record after Close: dropped %v, want %d", got, n+1)
	}
}

// TestWebhookSink: each batch is POSTed as JSON lines; a 5xx is retried,
// a 4xx is not.
func TestWebhookSink(t *testing.T) {
	var calls atomic.Int32
	var got []sandbox.AuditEvent
	var mu sync.Mutex
	status := http.StatusServiceUnavailable
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		mu.Lock()
		defer mu.Unlock()
		if r.Header.Get("Content-Type") != "application/x-ndjson" {
			t.Errorf("Content-Type %q", r.Header.Get("Content-Type"))
		}
		if status != http.StatusOK {
			w.WriteHeader(status)
			status = http.StatusOK
			return
		}
		sc := bufio.NewScanner(r.Body)
		for sc.Scan() {
			var e sandbox.AuditEvent
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				t.Errorf("line %q: %v", sc.Text(), err)
			}
			got = append(got, e)
		}
	}))
	defer srv.Close()
	sink, err := audit.OpenSink(srv.URL + "/siem")
	if err != nil {
		t.Fatal(err)
	}
	events := []sandbox.AuditEvent{{Tenant: "acme", Seq: 1, Action: audit.FileWrite, Hash: "h1"}, {Tenant: "acme", Seq: 2, Action: audit.FileRemove, Hash: "h2"}}
	if err := sink.Ship(t.Context(), events); err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 2 || len(got) != 2 || got[1].Hash != "h2" {
		t.Fatalf("%d calls, received %+v; want a retry after the 503, then both events", calls.Load(), got)
	}
	mu.Lock()
	status = http.StatusForbidden
	mu.Unlock()
	if err := sink.Ship(t.Context(), events); err == nil || calls.Load() != 3 {
		t.Fatalf("a 403: %v after %d calls; want an error, no retry", err, calls.Load())
	}
	for _, bad := range []string{"relative/path", "ftp://x", "http://"} {
		if _, err := audit.OpenSink(bad); err == nil {
			t.Errorf("OpenSink(%q) opened", bad)
		}
	}
}
