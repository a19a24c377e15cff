// Package testserver starts real corral serve processes for the tests of the
// SDK, the remote CLI, the examples and the OpenAPI spec: the binary built
// from this checkout, two tenants with known keys and callback secrets,
// private callbacks allowed, on the embedded backends.
package testserver

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/api"
	"github.com/corralhq/corral/internal/testenv"
)

// Keys and callback secrets of the tenants every test server knows.
const (
	AlphaKey    = "alpha-key-0123456789"
	BetaKey     = "beta-key-0123456789"
	AlphaSecret = "alpha-callback-secret"
	BetaSecret  = "beta-callback-secret"
)

// Options tune a server.
type Options struct {
	// Config is TOML appended to the test configuration.
	Config string
	// Extra are more command-line flags.
	Extra []string
}

// Server is a running corral serve.
type Server struct {
	URL  string
	Data string

	t    testing.TB
	cmd  *exec.Cmd
	logs *lockedBuffer
	done chan struct{}
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

// Start starts corral serve (as root, with the pinned runtimes) and waits
// until it is ready. It stops at the end of t, printing its log if t
// failed.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.Runtime(t, "runc")
	data := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := l.Addr().String()
	l.Close()
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
callback_secret = %q

[callbacks]
allow_private = true
base_delay = "300ms"
`, api.HashKey(AlphaKey), AlphaSecret, api.HashKey(BetaKey), BetaSecret) + o.Config
	cfgPath := filepath.Join(data, "corral.toml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"serve", "--config", cfgPath, "--listen", listen, "--data-dir", data,
		"--cache-dir", testenv.CacheDir(), "--cgroup-parent", testenv.CgroupParent}, o.Extra...)
	s := &Server{URL: "http://" + listen, Data: data, t: t, logs: &lockedBuffer{}, done: make(chan struct{})}
	s.cmd = exec.Command(testenv.Corral(t), args...)
	s.cmd.Stdout, s.cmd.Stderr = s.logs, s.logs
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		s.cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(func() {
		s.stop()
		if t.Failed() {
			log := s.logs.String()
			if len(log) > 8000 {
				log = "…" + log[len(log)-8000:]
			}
			t.Logf("server log (%s):\n%s", s.URL, log)
		}
	})
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get(s.URL + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		select {
		case <-s.done:
			t.Fatalf("corral serve exited:\n%s", s.logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("corral serve not ready:\n%s", s.logs.String())
		}
	}
}

func (s *Server) stop() {
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

// Env returns the environment a client of s runs with: CORRAL_ENDPOINT
// and CORRAL_API_KEY (tenant alpha), and CORRAL_CALLBACK_SECRET.
func (s *Server) Env() []string {
	return []string{"CORRAL_ENDPOINT=" + s.URL, "CORRAL_API_KEY=" + AlphaKey, "CORRAL_CALLBACK_SECRET=" + AlphaSecret}
}
