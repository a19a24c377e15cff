package contract

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/runtime/oci"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/test/testserver"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// Keys of the tenants every test server knows.
const (
	alphaKey    = testserver.AlphaKey
	betaKey     = testserver.BetaKey
	alphaSecret = testserver.AlphaSecret
)

// backend names a store and state pair.
type backend struct {
	name         string
	store, state func(t testing.TB) string
}

var (
	embedded = backend{name: "sqlite+memory",
		store: func(testing.TB) string { return "" }, state: func(testing.TB) string { return "memory" }}
	shared = backend{name: "postgres+redis", store: testenv.Postgres, state: testenv.Redis}
)

// server is a real corral serve process (test/testserver) whose failures
// go to t, the test or subtest using it now.
type server struct {
	*testserver.Server
	t *testing.T
}

type options struct {
	store, state string
	extra        []string
	config       string // TOML appended to the default test config
	// pool keeps the embedded warm pool; otherwise it is off, so that
	// tests can count the sandboxes their executions leave.
	pool bool
}

// startServer starts corral serve and waits until it is ready; it is
// stopped at the end of the test.
func startServer(t *testing.T, o options) *server {
	t.Helper()
	return &server{t: t, Server: testserver.Start(t, testserver.Options{
		Config: o.config, Extra: o.extra, Store: o.store, State: o.state,
		NoPool: !o.pool && !strings.Contains(o.config, "[pool]"),
	})}
}

// call sends a JSON request with key and decodes a JSON answer into out
// (unless nil). It returns the status and raw body.
func (s *server) call(key, method, path string, body any, out any) (int, []byte) {
	s.t.Helper()
	return testserver.Do(s.t, s.URL, key, method, path, body, out)
}

// sse is one Server-Sent Event.
type sse struct {
	id, event, data string
}

// events reads an execution's event stream to its end.
func (s *server) events(key, id, lastEventID string) []sse {
	s.t.Helper()
	req, _ := http.NewRequest("GET", s.URL+"/v1/executions/"+id+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	client := &http.Client{Timeout: 60 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		s.t.Fatalf("events: %d %s", resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		s.t.Errorf("content type %q", ct)
	}
	var out []sse
	var cur sse
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.event != "" {
				out = append(out, cur)
				if cur.event == "done" {
					return out
				}
			}
			cur = sse{}
		case strings.HasPrefix(line, "id: "):
			cur.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "event: "):
			cur.event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.data = strings.TrimPrefix(line, "data: ")
		}
	}
	return out
}

// waitOutput follows an execution's event stream until its stdout so far
// contains want: the program is running. It fails the test if the stream
// ends or 30s pass first.
func (s *server) waitOutput(key, id, want string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.t.Context(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", s.URL+"/v1/executions/"+id+"/events", nil)
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		s.t.Fatalf("events: %d %s", resp.StatusCode, b)
	}
	var stdout strings.Builder
	event := ""
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: ") && event == "stdout":
			var d struct{ Text string }
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &d); err != nil {
				s.t.Fatalf("stdout event %q: %v", line, err)
			}
			stdout.WriteString(d.Text)
			if strings.Contains(stdout.String(), want) {
				return
			}
		}
	}
	s.t.Fatalf("execution %s: no %q in its output before the stream ended (%v); stdout %q", id, want, sc.Err(), stdout.String())
}

// sandboxesLeft lists sandbox directories in the server's data dir.
func (s *server) sandboxesLeft() []string {
	dirs, _ := oci.SandboxDirs(s.Data)
	return dirs
}
