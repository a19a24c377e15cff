// Package envd serves what E2B's in-sandbox daemon envd serves on port
// 49983, backed by Corral's live sandboxes (internal/live): the Connect
// services process.Process and filesystem.Filesystem (the Connect
// protocol with the JSON codec; unary calls, server streams and a client
// stream), GET and POST /files, and GET /health. The
// sandbox a request is for comes from its context (internal/e2b/target),
// put there by the dispatcher once the sandbox's access token matched.
package envd

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/corralhq/corral/internal/e2b/target"
	"github.com/corralhq/corral/internal/live"
)

// box returns the handle of the live sandbox t names (target.ErrGone once
// it is not there).
func (s *service) box(t target.Target) (*live.Sandbox, error) { return t.Sandbox(s.m) }

// on calls f on the live sandbox t names.
func on[T any](s *service, t target.Target, f func(*live.Sandbox) (T, error)) (T, error) {
	sb, err := s.box(t)
	if err != nil {
		var zero T
		return zero, err
	}
	return f(sb)
}

// Bounds of the services.
const (
	// maxMessage bounds a Connect request message (SendInput's data is
	// the largest).
	maxMessage = 8 << 20
	// defaultKeepalive is how often a stream with nothing to say sends a
	// keep-alive event when the client did not ask (Keepalive-Ping-Interval,
	// seconds).
	defaultKeepalive = 50 * time.Second
	// minKeepalive is the shortest interval a client may ask for.
	minKeepalive = time.Second
)

// service holds what the handlers share.
type service struct {
	m   *live.Manager
	log *slog.Logger
	// keepalive overrides the keep-alive interval (tests).
	keepalive time.Duration

	mu       sync.Mutex
	watchers map[string]*watcher // by watcher id
}

// New returns the envd handler over the live sandboxes of m. Requests must carry a
// target.Target in their context; one without is answered 500 (a wiring
// fault, not the client's).
func New(m *live.Manager, log *slog.Logger) http.Handler {
	return newService(m, log).handler()
}

func newService(m *live.Manager, log *slog.Logger) *service {
	return &service{m: m, log: log, watchers: map[string]*watcher{}}
}

func (s *service) handler() http.Handler {
	opts := []connect.HandlerOption{
		connect.WithCodec(jsonCodec{}),
		connect.WithCodec(jsonUTF8{}),
		connect.WithCodec(protoRefused{}),
		connect.WithReadMaxBytes(maxMessage),
		compression(),
		connect.WithInterceptors(received{}),
		connect.WithRecover(func(_ context.Context, spec connect.Spec, _ http.Header, v any) error {
			s.log.Error("envd: panic", "procedure", spec.Procedure, "panic", v)
			return connect.NewError(connect.CodeInternal, errInternal)
		}),
	}
	mux := http.NewServeMux()
	for path, h := range s.processHandlers(opts) {
		mux.Handle(path, h)
	}
	for path, h := range s.filesystemHandlers(opts) {
		mux.Handle(path, h)
	}
	mux.HandleFunc("GET /health", s.health)
	mux.HandleFunc("GET /files", s.download)
	mux.HandleFunc("POST /files", s.upload)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := target.From(r.Context()); !ok {
			s.log.Error("envd: a request reached the service without a target", "path", r.URL.Path)
			target.WriteError(w, http.StatusInternalServerError, "internal error")
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// tgt is the sandbox a request is for (the handler checked it is there).
func tgt(ctx context.Context) target.Target {
	t, _ := target.From(ctx)
	return t
}

// health answers 204 while the sandbox lives, and 502 (which E2B's SDKs
// read as "the sandbox is not running") once it does not.
func (s *service) health(w http.ResponseWriter, r *http.Request) {
	t := tgt(r.Context())
	if _, err := s.box(t); err != nil {
		f := classify(r.Context(), err, s.log)
		target.WriteError(w, f.status, f.msg)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// keepaliveEvery is the keep-alive interval a stream uses: the client's
// Keepalive-Ping-Interval (seconds), bounded.
func (s *service) keepaliveEvery(h http.Header) time.Duration {
	if s.keepalive > 0 {
		return s.keepalive
	}
	var n int
	if v := h.Get("Keepalive-Ping-Interval"); v != "" {
		for _, c := range v {
			if c < '0' || c > '9' || n > 3600 {
				return defaultKeepalive
			}
			n = n*10 + int(c-'0')
		}
		return max(time.Duration(n)*time.Second, minKeepalive)
	}
	return defaultKeepalive
}

// messages is the Wire of a Connect server stream: each message is sent
// and flushed on its own (connect's Send), and a keep-alive is the
// stream's keepalive message, which the function sends.
type messages func() error

func (m messages) KeepAlive() error { return m() }
func (messages) Flush() error       { return nil }
