package contract

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/api"
	"github.com/corralhq/corral/internal/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.Cleanup()
	os.Exit(code)
}

// Keys of the tenants every test server knows.
const (
	alphaKey    = "alpha-key-0123456789"
	betaKey     = "beta-key-0123456789"
	alphaSecret = "alpha-callback-secret"
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

// server is a real corral serve process.
type server struct {
	t      *testing.T
	URL    string
	listen string
	data   string
	args   []string
	cmd    *exec.Cmd
	logs   *lockedBuffer
	done   chan struct{}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

type options struct {
	store, state string
	// data reuses a data directory (a restart); empty makes a new one.
	data   string
	listen string
	extra  []string
	config string // TOML appended to the default test config
	// pool keeps the embedded warm pool; otherwise it is off, so that
	// tests can count the sandboxes their executions leave.
	pool bool
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startServer starts corral serve and waits until it is ready; it is
// stopped at the end of the test.
func startServer(t *testing.T, o options) *server {
	t.Helper()
	testenv.RequireRoot(t)
	if o.data == "" {
		o.data = t.TempDir()
	}
	if o.listen == "" {
		o.listen = freeAddr(t)
	}
	cfgPath := filepath.Join(o.data, "corral.toml")
	cfg := fmt.Sprintf(`
[log]
level = "debug"
format = "text"

[[tenants]]
name = "alpha"
api_key_sha256 = [%q]
callback_secret = %q

[[tenants]]
name = "beta"
api_key_sha256 = [%q]
callback_secret = "beta-callback-secret"

[callbacks]
allow_private = true
base_delay = "300ms"
`, api.HashKey(alphaKey), alphaSecret, api.HashKey(betaKey)) + o.config
	if !o.pool && !strings.Contains(o.config, "[pool]") {
		cfg += "\n[pool]\nwarm = []\n"
	}
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"serve", "--config", cfgPath, "--listen", o.listen, "--data-dir", o.data,
		"--cache-dir", testenv.CacheDir(), "--cgroup-parent", testenv.CgroupParent}
	if o.store != "" {
		args = append(args, "--store", o.store)
	}
	if o.state != "" {
		args = append(args, "--state", o.state)
	}
	args = append(args, o.extra...)
	s := &server{t: t, URL: "http://" + o.listen, listen: o.listen, data: o.data, args: args, logs: &lockedBuffer{}}
	s.start()
	t.Cleanup(func() {
		s.stop()
		if t.Failed() {
			t.Logf("server log (%s):\n%s", s.listen, tail(s.logs.String(), 8000))
		}
	})
	return s
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

func (s *server) start() {
	s.t.Helper()
	s.cmd = exec.Command(testenv.Corral(s.t), s.args...)
	s.cmd.Stdout, s.cmd.Stderr = s.logs, s.logs
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	s.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) {
		cmd.Wait()
		close(done)
	}(s.cmd, s.done)
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(s.URL + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		select {
		case <-s.done:
			s.t.Fatalf("corral serve exited:\n%s", s.logs.String())
		default:
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("corral serve not ready:\n%s", s.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop ends the server gracefully.
func (s *server) stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	select {
	case <-s.done:
		return
	default:
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		s.t.Errorf("corral serve ignored SIGTERM")
		s.cmd.Process.Kill()
		<-s.done
	}
}

// kill ends the server with SIGKILL, as a crash would.
func (s *server) kill() {
	s.cmd.Process.Kill()
	<-s.done
}

// restart stops the server and starts it again on the same data dir and
// address.
func (s *server) restart() {
	s.stop()
	s.start()
}

// call sends a JSON request with key and decodes a JSON answer into out
// (unless nil). It returns the status and raw body.
func (s *server) call(key, method, path string, body any, out any) (int, []byte) {
	s.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		r = bytes.NewReader(b)
	case string:
		r = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			s.t.Fatal(err)
		}
		r = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, s.URL+path, r)
	if err != nil {
		s.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			s.t.Fatalf("%s %s: decode %q: %v", method, path, raw, err)
		}
	}
	return resp.StatusCode, raw
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

// sandboxesLeft lists sandbox directories in the server's data dir.
func (s *server) sandboxesLeft() []string {
	dirs, _ := filepath.Glob(filepath.Join(s.data, "sandboxes", "*", "sb-*"))
	return dirs
}
