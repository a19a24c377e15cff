// Package testserver starts real corral serve processes for the tests of the
// SDK, the remote CLI, the examples and the OpenAPI spec: the binary built
// from this checkout, two tenants with known keys and callback secrets,
// private callbacks allowed, on the embedded backends. RunscBuild stands
// for a runsc build in progress, for servers whose gvisor tier is pending.
package testserver

import (
	"bytes"
	"crypto/tls"
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
	"github.com/corralhq/corral/internal/tlscert"
	"github.com/corralhq/corral/internal/tlscert/certtest"
)

// Keys and callback secrets of the tenants every test server knows.
const (
	AlphaKey    = "alpha-key-0123456789"
	BetaKey     = "beta-key-0123456789"
	AlphaSecret = "alpha-callback-secret"
	BetaSecret  = "beta-callback-secret"
	// AlphaE2BKey and BetaE2BKey are second keys of the same tenants in
	// the shape E2B's SDKs expect (e2b_ and 40 hex digits), for the stock
	// SDKs (test/e2b).
	AlphaE2BKey = "e2b_a1fa0000000000000000000000000000000000a1"
	BetaE2BKey  = "e2b_be7a0000000000000000000000000000000000be"
)

// Options tune a server.
type Options struct {
	// Config is TOML appended to the test configuration.
	Config string
	// Extra are more command-line flags.
	Extra []string
	// Store and State are the --store and --state URLs; empty: the
	// embedded backends.
	Store, State string
	// NoPool turns the embedded warm pool off, for tests that count the
	// sandboxes their executions leave.
	NoPool bool
	// TLS, if set, makes the server serve https with its files (nodes
	// verify each other with its CA); the server's HTTP client trusts the
	// CA.
	TLS *TLS
	// StopWait is how long Stop waits after SIGTERM before it kills (30 s
	// if zero): a test whose drain takes longer (--drain-timeout) says so.
	StopWait time.Duration
}

// TLS is a certificate and key in PEM files, and the CA that signed them.
type TLS struct {
	Cert, Key, CA string
}

// LocalTLS writes a leaf of ca for 127.0.0.1, localhost and, if domain is
// not empty, *.domain, in a directory of the test's.
func LocalTLS(t testing.TB, ca *certtest.CA, domain string) *TLS {
	t.Helper()
	dir := t.TempDir()
	f := &TLS{Cert: filepath.Join(dir, "tls.crt"), Key: filepath.Join(dir, "tls.key"), CA: filepath.Join(dir, "ca.pem")}
	ca.Issue(t, domain, time.Time{}).Write(t, f.Cert, f.Key)
	certtest.WriteFile(t, f.CA, ca.PEM)
	return f
}

// Client is an HTTP client that trusts the CA alone.
func (f *TLS) Client(t testing.TB) *http.Client {
	t.Helper()
	pool, err := tlscert.Pool(f.CA)
	if err != nil {
		t.Fatal(err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool}
	return &http.Client{Transport: tr}
}

// Server is a running corral serve.
type Server struct {
	URL  string
	Data string
	// HTTP is a client of the server: one that trusts its CA when it
	// serves https.
	HTTP *http.Client
	// TLS is what the server serves https with, if it does.
	TLS *TLS

	t        testing.TB
	args     []string
	stopWait time.Duration
	cmd      *exec.Cmd
	logs     *lockedBuffer
	done     chan struct{}
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
	data := testenv.DataDir(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := l.Addr().String()
	l.Close()
	// A stopping server gives what runs 10 s (the default is minutes):
	// Stop waits 30 s before it kills.
	cfg := fmt.Sprintf(`
drain_timeout = "10s"

[log]
level = "debug"
format = "text"

[[tenants]]
name = "alpha"
api_key_sha256 = [%q, %q]
callback_secret = %q

[[tenants]]
name = "beta"
api_key_sha256 = [%q, %q]
callback_secret = %q

[callbacks]
allow_private = true
base_delay = "300ms"
`, api.HashKey(AlphaKey), api.HashKey(AlphaE2BKey), AlphaSecret, api.HashKey(BetaKey), api.HashKey(BetaE2BKey), BetaSecret) + o.Config
	if o.NoPool {
		cfg += "\n[pool]\nwarm = []\n"
	}
	s := &Server{URL: "http://" + listen, Data: data, t: t, HTTP: http.DefaultClient, logs: &lockedBuffer{}, stopWait: o.StopWait}
	if s.stopWait == 0 {
		s.stopWait = 30 * time.Second
	}
	if o.TLS != nil {
		s.URL, s.HTTP, s.TLS = "https://"+listen, o.TLS.Client(t), o.TLS
		cfg += fmt.Sprintf("\n[tls]\ncert = %q\nkey = %q\npeer_ca = %q\n", o.TLS.Cert, o.TLS.Key, o.TLS.CA)
	}
	cfgPath := filepath.Join(data, "corral.toml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"serve", "--config", cfgPath, "--listen", listen, "--data-dir", data,
		"--cache-dir", testenv.CacheDir(), "--cgroup-parent", testenv.CgroupParent}
	if o.Store != "" {
		args = append(args, "--store", o.Store)
	}
	if o.State != "" {
		args = append(args, "--state", o.State)
	}
	s.args = append(args, o.Extra...)
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			log := s.logs.String()
			if len(log) > 8000 {
				log = "…" + log[len(log)-8000:]
			}
			t.Logf("server log (%s):\n%s", s.URL, log)
		}
	})
	s.Launch()
	return s
}

// Launch starts the server process and waits until it is ready: at
// Start, and again after Stop or Kill, on the same address and data.
func (s *Server) Launch() {
	s.t.Helper()
	s.cmd = exec.Command(testenv.Corral(s.t), s.args...)
	s.cmd.Stdout, s.cmd.Stderr = s.logs, s.logs
	if dir := os.Getenv("CORRAL_TEST_LOG_DIR"); dir != "" {
		// Whole logs for a look by hand; a failed test prints the tail.
		_, addr, _ := strings.Cut(s.URL, "://")
		name := strings.NewReplacer("/", "_", ":", "_").Replace(s.t.Name() + "-" + addr + ".log")
		if f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); err == nil {
			s.t.Cleanup(func() { f.Close() })
			w := io.MultiWriter(s.logs, f)
			s.cmd.Stdout, s.cmd.Stderr = w, w
		}
	}
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	s.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) {
		cmd.Wait()
		close(done)
	}(s.cmd, s.done)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := s.HTTP.Get(s.URL + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
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
	}
}

// Stop ends the server with SIGTERM, as an operator would.
func (s *Server) Stop() {
	if s.done == nil {
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
	case <-time.After(s.stopWait):
		s.t.Errorf("corral serve ignored SIGTERM")
		s.cmd.Process.Kill()
		<-s.done
	}
}

// ExitCode is the exit status of the server's last process, once it has
// exited (after Stop or Kill); -1 while it runs or if a signal ended it.
func (s *Server) ExitCode() int {
	select {
	case <-s.done:
		return s.cmd.ProcessState.ExitCode()
	default:
		return -1
	}
}

// Kill ends the server with SIGKILL, as a crash would.
func (s *Server) Kill() {
	s.cmd.Process.Kill()
	<-s.done
}

// Restart stops the server and starts it again on the same address and
// data directory.
func (s *Server) Restart() {
	s.Stop()
	s.Launch()
}

// Log returns what the server logged so far.
func (s *Server) Log() string { return s.logs.String() }

// Env returns the environment a client of s runs with: CORRAL_ENDPOINT
// and CORRAL_API_KEY (tenant alpha), and CORRAL_CALLBACK_SECRET.
func (s *Server) Env() []string {
	return []string{"CORRAL_ENDPOINT=" + s.URL, "CORRAL_API_KEY=" + AlphaKey, "CORRAL_CALLBACK_SECRET=" + AlphaSecret}
}
