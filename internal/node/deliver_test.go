package node

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/notify"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/sandbox"
)

// memArtifacts keeps artifacts in memory and links them under a made-up
// host; a key containing "broken" cannot be linked.
type memArtifacts struct {
	mu   sync.Mutex
	objs map[string][]byte
}

func (m *memArtifacts) Put(_ context.Context, key string, r io.Reader, _ int64, _ string) (string, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return "", err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.objs == nil {
		m.objs = map[string][]byte{}
	}
	m.objs[key] = b
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

func (m *memArtifacts) Link(_ context.Context, key string, ttl time.Duration) (string, time.Time, error) {
	if strings.Contains(key, "broken") {
		return "", time.Time{}, errors.New("cannot sign")
	}
	return "https://blob.test/" + key, time.Now().Add(ttl), nil
}

func (m *memArtifacts) get(key string) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.objs[key]
}

// delivery is one POST a receiver got.
type delivery struct {
	path string
	body []byte
}

// receiver is a local HTTP server that takes every POST and reports it.
func receiver(t *testing.T) (*httptest.Server, chan delivery) {
	got := make(chan delivery, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- delivery{path: r.URL.Path, body: b}
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

// TestDeliveries: a final record is stored with its callback and its
// memory delivery, and the notifier sends them: the callback the record
// (artifact links signed), the memory service the summary (artifacts
// named); GET shows the callback delivered. A record ended by a cancel
// is delivered the same way. Artifact links are signed when read, never
// stored.
func TestDeliveries(t *testing.T) {
	w := newWorld(t)
	srv, got := receiver(t)
	secret := func(string) []byte { return []byte("0123456789abcdef0123456789abcdef") }
	ncfg := notify.DefaultConfig()
	ncfg.Poll, ncfg.BaseDelay = 50*time.Millisecond, 10*time.Millisecond
	notifier := notify.New(ncfg, w.store, map[string]notify.Route{
		store.KindCallback: {Client: srv.Client(), Secret: secret},
		store.KindMemory:   {Client: srv.Client(), Secret: secret},
	}, testLog(t))
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		notifier.Run(ctx)
		close(stopped)
	}()
	t.Cleanup(func() {
		cancel()
		<-stopped
	})
	arts := &memArtifacts{}
	a := w.newNode("a", func(s *setup) {
		s.deps.Notifier, s.deps.Artifacts = notifier, arts
		s.cfg.MemoryURL = srv.URL + "/memory"
	})
	a.start(t)

	code := `import os
os.makedirs("output")
open("output/report.txt", "w").write("hello")
open("output/broken.txt", "w").write("x")
print("hi")`
	submit(t, a, "acme", sandbox.ExecuteRequest{ExecutionID: "d1", Language: "python", Code: code, CallbackURL: srv.URL + "/cb"})
	rec := final(t, a, "acme", "d1")
	if rec.Status != sandbox.StatusSuccess || len(rec.Artifacts) != 2 {
		t.Fatalf("record %s with %d artifacts (%s)", rec.Status, len(rec.Artifacts), rec.Summary)
	}
	const prefix = "acme/executions/d1/output/"
	links := map[string]string{}
	for _, art := range rec.Artifacts {
		links[art.Path] = art.URL
	}
	if links["report.txt"] != "https://blob.test/"+prefix+"report.txt" || links["broken.txt"] != "" {
		t.Errorf("artifact links %v: want report.txt's signed, none for broken.txt", links)
	}
	if string(arts.get(prefix+"report.txt")) != "hello" {
		t.Errorf("stored artifact %q", arts.get(prefix+"report.txt"))
	}
	for _, art := range w.stored("acme", "d1").Record.Artifacts {
		if art.URL != "" {
			t.Errorf("a link was stored: %s", art.URL)
		}
	}

	byPath := map[string][]byte{}
	for range 2 {
		select {
		case d := <-got:
			byPath[d.path] = d.body
		case <-time.After(patience):
			t.Fatalf("deliveries received: %v", byPath)
		}
	}
	var cb sandbox.Result
	if err := json.Unmarshal(byPath["/cb"], &cb); err != nil {
		t.Fatalf("callback body %q: %v", byPath["/cb"], err)
	}
	if cb.ExecutionID != "d1" || cb.Status != sandbox.StatusSuccess || cb.Stdout != "hi\n" || cb.Summary != rec.Summary {
		t.Errorf("callback: %+v", cb)
	}
	for _, art := range cb.Artifacts {
		if art.Path == "report.txt" && art.URL != links["report.txt"] {
			t.Errorf("callback's artifact link %q, want %q", art.URL, links["report.txt"])
		}
	}
	var mem memoryEntry
	if err := json.Unmarshal(byPath["/memory"], &mem); err != nil {
		t.Fatalf("memory body %q: %v", byPath["/memory"], err)
	}
	if mem.Tenant != "acme" || mem.ExecutionID != "d1" || mem.Status != sandbox.StatusSuccess || mem.Summary != rec.Summary ||
		mem.Language != "python" || mem.ExitCode == nil || !mem.CreatedAt.Equal(rec.CreatedAt) || !mem.FinishedAt.Equal(rec.FinishedAt) ||
		len(mem.Artifacts) != 2 {
		t.Errorf("memory entry: %+v; record created %s finished %s", mem, rec.CreatedAt, rec.FinishedAt)
	}
	eventually(t, "GET shows the callback delivered", func() bool {
		r, err := a.Get(t.Context(), "acme", "d1")
		return err == nil && r.Callback != nil && r.Callback.State == store.DeliveryDelivered &&
			r.Callback.URL == srv.URL+"/cb" && r.Callback.Attempts == 1
	})

	// A cancel's record goes out too; without a callback_url, only to
	// the memory service, and GET shows no callback.
	a.stop()
	submit(t, a, "acme", sandbox.ExecuteRequest{ExecutionID: "d2", Language: "python", Code: "pass"})
	if _, err := a.Cancel(t.Context(), "acme", "d2"); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-got:
		if err := json.Unmarshal(d.body, &mem); err != nil || d.path != "/memory" || mem.ExecutionID != "d2" ||
			mem.Status != sandbox.StatusCancelled || mem.ErrorType != sandbox.ErrCancelled {
			t.Errorf("delivery of the cancel: %s %s", d.path, d.body)
		}
	case <-time.After(patience):
		t.Fatal("no delivery of the cancel")
	}
	if r, err := a.Get(t.Context(), "acme", "d2"); err != nil || r.Callback != nil {
		t.Errorf("get d2: callback %+v, %v; want none", r.Callback, err)
	}
}
