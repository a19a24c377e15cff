// Package api is Corral's HTTP interface (/v1, docs/api.md): authentication
// and tenants, request decoding and validation, JSON errors, executions
// (submit, wait, get, list, cancel), sessions and live sandboxes (their
// processes and files), Server-Sent Events, health and metrics. It holds no execution logic: that is the node's.
package api

import (
	"context"
	"log/slog"
	"net/http"
	"runtime/debug"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/corralhq/corral/internal/audit"
	"github.com/corralhq/corral/internal/cluster"
	"github.com/corralhq/corral/internal/live"
	"github.com/corralhq/corral/internal/metrics"
	"github.com/corralhq/corral/internal/node"
	"github.com/corralhq/corral/internal/ports"
	"github.com/corralhq/corral/internal/session"
	"github.com/corralhq/corral/internal/tracing"
	"github.com/corralhq/corral/internal/ui"
)

// Config configures the API.
type Config struct {
	// MaxBodyBytes caps a request body (413 beyond).
	MaxBodyBytes int64
}

// Pinger is a backend that readiness checks.
type Pinger interface {
	Ping(ctx context.Context) error
}

// Deps are what the API serves from. Auth and Metrics are needed, and
// Node for /v1/executions; each of the others, if nil, turns its
// endpoints off (404) or, for Cluster, makes every session and sandbox
// this node's.
type Deps struct {
	// Node runs executions (/v1/executions).
	Node    *node.Node
	Auth    *Auth
	Metrics *metrics.Metrics
	Log     *slog.Logger // nil: discarded
	// Ready lists what /readyz checks.
	Ready []Pinger
	// Sessions serves /v1/sessions (workspace sessions and their files).
	Sessions *session.Manager
	// Sandboxes serves /v1/sandboxes (live sandboxes).
	Sandboxes *live.Manager
	// Cluster makes a call about a session or sandbox reach the node that
	// owns it.
	Cluster *cluster.Cluster
	// Blobs serves signed artifact links under /v1/blobs/ (the local blob
	// store's handler; S3's links point elsewhere).
	Blobs http.Handler
	// Stats serves GET /v1/stats (store.Store is one).
	Stats StatsSource
	// Audit records what each authenticated call does (internal/audit):
	// every call's context carries it with the caller's tenant and key id.
	// Nil records nothing.
	Audit audit.Recorder
	// AuditLog serves GET /v1/audit (store.Store is one); nil: 404.
	AuditLog AuditSource
}

// Server serves the API. Its dependencies are fixed at New; only Drain
// changes it afterwards. It is safe for concurrent use.
type Server struct {
	cfg      Config
	node     *node.Node
	auth     *Auth
	metrics  *metrics.Metrics
	ready    []Pinger
	log      *slog.Logger
	sessions *session.Manager // nil: /v1/sessions is 404
	live     *live.Manager    // nil: /v1/sandboxes is 404
	cluster  *cluster.Cluster // nil: every session is this node's
	blobs    http.Handler     // nil: no /v1/blobs/
	stats    StatsSource      // nil: GET /v1/stats is 404
	audit    audit.Recorder   // nil: nothing recorded
	auditLog AuditSource      // nil: GET /v1/audit is 404
	// ports serves /v1/sandboxes/{id}/ports/… (internal/ports).
	ports *ports.Proxy
	// draining is set once the node is told to stop: /readyz answers 503
	// so load balancers send its traffic elsewhere while it finishes.
	draining atomic.Bool
}

// Drain makes /readyz answer 503 from now on; everything else is served
// as before (a client waiting for an execution still gets its answer).
func (s *Server) Drain() { s.draining.Store(true) }

// Extension serves another API beside /v1 on the same listener
// (internal/e2b: E2B's). It is given to Handler, not to New: an extension
// is built over the Server (it routes its calls through RouteSandbox), so
// it comes after it.
type Extension interface {
	// Routes registers the extension's routes with route (http.ServeMux
	// patterns that do not collide with the API's own).
	Routes(route func(pattern string, h http.HandlerFunc))
	// Traffic reports whether r is for ServeTraffic instead of the
	// routes at all (E2B's in-sandbox traffic, named by headers or host).
	Traffic(r *http.Request) bool
	// ServeTraffic serves a request Traffic claimed.
	ServeTraffic(w http.ResponseWriter, r *http.Request)
}

// New returns a server over d.
func New(cfg Config, d Deps) *Server {
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 10 << 20
	}
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	return &Server{cfg: cfg, node: d.Node, auth: d.Auth, metrics: d.Metrics, ready: d.Ready, log: d.Log,
		sessions: d.Sessions, live: d.Sandboxes, cluster: d.Cluster, blobs: d.Blobs, stats: d.Stats,
		audit: d.Audit, auditLog: d.AuditLog,
		ports: ports.New(d.Log)}
}

// authed is a handler that knows its tenant.
type authed func(w http.ResponseWriter, r *http.Request, t *Tenant)

// Handler returns the API's routes, and those of each extension beside
// them; an extension's traffic (Extension.Traffic) is its own, in the
// order given.
func (s *Server) Handler(exts ...Extension) http.Handler {
	mux := http.NewServeMux()
	route := func(pattern string, h http.HandlerFunc) {
		mux.Handle(pattern, s.instrument(pattern, h))
	}
	route("POST /v1/executions", s.withTenant(s.submit))
	route("GET /v1/executions", s.withTenant(s.list))
	route("GET /v1/executions/{id}", s.withTenant(s.get))
	route("POST /v1/executions/{id}/cancel", s.withTenant(s.cancel))
	route("GET /v1/executions/{id}/events", s.withTenant(s.events))
	route("GET /v1/executions/{id}/egress", s.withTenant(s.egress))
	route("GET /v1/stats", s.withTenant(s.statsHandler))
	route("GET /v1/audit", s.withTenant(s.auditHandler))
	route("PUT /v1/sessions/{id}", s.withTenant(s.touchSession))
	route("POST /v1/sessions/{id}", s.withTenant(s.touchSession))
	route("GET /v1/sessions/{id}", s.withTenant(s.getSession))
	route("DELETE /v1/sessions/{id}", s.withTenant(s.deleteSession))
	route("GET /v1/sessions/{id}/files/{path...}", s.withTenant(s.getFile))
	route("PUT /v1/sessions/{id}/files/{path...}", s.withTenant(s.putFile))
	route("DELETE /v1/sessions/{id}/files/{path...}", s.withTenant(s.deleteFile))
	route("POST /v1/sandboxes", s.withTenant(s.createSandbox))
	route("GET /v1/sandboxes", s.withTenant(s.listSandboxes))
	route("GET /v1/sandboxes/{id}", s.withTenant(s.getSandbox))
	route("DELETE /v1/sandboxes/{id}", s.withTenant(s.deleteSandbox))
	route("POST /v1/sandboxes/{id}/timeout", s.withTenant(s.setSandboxTimeout))
	route("POST /v1/sandboxes/{id}/pause", s.withTenant(s.pauseSandbox))
	route("POST /v1/sandboxes/{id}/resume", s.withTenant(s.resumeSandbox))
	route("GET /v1/sandboxes/{id}/metrics", s.withTenant(s.sandboxMetrics))
	route("POST /v1/sandboxes/{id}/snapshots", s.withTenant(s.createSnapshot))
	route("POST /v1/sandboxes/{id}/fork", s.withTenant(s.forkSandbox))
	route("GET /v1/snapshots", s.withTenant(s.listSnapshots))
	route("GET /v1/snapshots/{id}", s.withTenant(s.getSnapshot))
	route("DELETE /v1/snapshots/{id}", s.withTenant(s.deleteSnapshot))
	route("POST /v1/sandboxes/{id}/processes", s.withTenant(s.startProcess))
	route("GET /v1/sandboxes/{id}/processes", s.withTenant(s.listProcesses))
	route("GET /v1/sandboxes/{id}/processes/{pid}", s.withTenant(s.getProcess))
	route("GET /v1/sandboxes/{id}/processes/{pid}/events", s.withTenant(s.processEvents))
	route("POST /v1/sandboxes/{id}/processes/{pid}/stdin", s.withTenant(s.processStdin))
	route("POST /v1/sandboxes/{id}/processes/{pid}/stdin/close", s.withTenant(s.closeStdin))
	route("POST /v1/sandboxes/{id}/processes/{pid}/signal", s.withTenant(s.signalProcess))
	route("POST /v1/sandboxes/{id}/processes/{pid}/resize", s.withTenant(s.resizeProcess))
	route("GET /v1/sandboxes/{id}/files", s.withTenant(s.readSandboxFile))
	route("PUT /v1/sandboxes/{id}/files", s.withTenant(s.writeSandboxFile))
	route("DELETE /v1/sandboxes/{id}/files", s.withTenant(s.removeSandboxFile))
	route("GET /v1/sandboxes/{id}/files/list", s.withTenant(s.listSandboxFiles))
	route("GET /v1/sandboxes/{id}/files/stat", s.withTenant(s.statSandboxFile))
	route("POST /v1/sandboxes/{id}/files/mkdir", s.withTenant(s.makeSandboxDir))
	route("POST /v1/sandboxes/{id}/files/move", s.withTenant(s.moveSandboxFile))
	route("GET /v1/sandboxes/{id}/files/watch", s.withTenant(s.watchSandboxDir))
	route("POST /v1/sandboxes/{id}/contexts", s.withTenant(s.createContext))
	route("GET /v1/sandboxes/{id}/contexts", s.withTenant(s.listContexts))
	route("DELETE /v1/sandboxes/{id}/contexts/{cid}", s.withTenant(s.deleteContext))
	route("POST /v1/sandboxes/{id}/contexts/{cid}/run", s.withTenant(s.runContext))
	route("POST /v1/sandboxes/{id}/contexts/{cid}/restart", s.withTenant(s.restartContext))
	route("POST /v1/sandboxes/{id}/contexts/{cid}/fork", s.withTenant(s.forkContext))
	route("POST /v1/sandboxes/{id}/contexts/{cid}/interrupt", s.withTenant(s.interruptContext))
	// A server in the sandbox: any method it answers (GET answers HEAD
	// too), WebSocket included.
	route("GET /v1/sandboxes/{id}/ports/{port}/{path...}", s.withTenant(s.sandboxPort))
	route("POST /v1/sandboxes/{id}/ports/{port}/{path...}", s.withTenant(s.sandboxPort))
	route("PUT /v1/sandboxes/{id}/ports/{port}/{path...}", s.withTenant(s.sandboxPort))
	route("PATCH /v1/sandboxes/{id}/ports/{port}/{path...}", s.withTenant(s.sandboxPort))
	route("DELETE /v1/sandboxes/{id}/ports/{port}/{path...}", s.withTenant(s.sandboxPort))
	route("OPTIONS /v1/sandboxes/{id}/ports/{port}/{path...}", s.withTenant(s.sandboxPort))
	if s.blobs != nil {
		// Signed links carry their own authorisation: no API key.
		route("GET /v1/blobs/{key...}", s.blobs.ServeHTTP)
		route("HEAD /v1/blobs/{key...}", s.blobs.ServeHTTP)
	}
	route("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	route("GET /readyz", s.readyz)
	route("GET /metrics", s.metrics.Handler().ServeHTTP)
	// The dashboard is a page, not part of the API (or of its spec): it
	// calls /v1 from the browser with the key its user signs in with.
	mux.Handle("GET /ui/", s.instrument("/ui/", ui.Handler().ServeHTTP))
	mux.Handle("GET /{$}", s.instrument("/", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/", http.StatusFound)
	}))
	route("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, notFound("no such endpoint: "+r.Method+" "+r.URL.Path))
	})
	if len(exts) == 0 {
		return mux
	}
	traffic := make([]http.Handler, len(exts))
	for i, x := range exts {
		x.Routes(route)
		traffic[i] = s.instrument("sandbox traffic", x.ServeTraffic)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for i, x := range exts {
			if x.Traffic(r) {
				traffic[i].ServeHTTP(w, r)
				return
			}
		}
		mux.ServeHTTP(w, r)
	})
}

func (s *Server) withTenant(h authed) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		t, err := s.auth.Authenticate(r)
		if err != nil {
			writeError(w, err)
			return
		}
		if s.audit != nil {
			r = r.WithContext(audit.With(r.Context(), s.audit, audit.Actor{Tenant: t.Name, KeyID: audit.KeyID(bearerKey(r))}))
		}
		h(w, r, t)
	}
}

// statusWriter remembers the status for metrics; it passes Flush through
// for SSE.
type statusWriter struct {
	http.ResponseWriter
	status int
	// span is the request's span's context, for its error body and log
	// lines (invalid when untraced).
	span trace.SpanContext
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// untraced are the routes probes and scrapers call every few seconds: a
// trace each would bury the calls worth tracing.
var untraced = map[string]bool{"GET /healthz": true, "GET /readyz": true, "GET /metrics": true}

// instrument counts requests, traces each in a span named for its route
// (internal/tracing; the trace id then names the request's log lines and
// error body), and turns panics into 500s.
func (s *Server) instrument(route string, h http.HandlerFunc) http.Handler {
	traced := !untraced[route]
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		span := trace.SpanFromContext(r.Context()) // a no-op span: untraced
		if traced {
			r, span = tracing.StartServer(r, route)
		}
		sw := &statusWriter{ResponseWriter: w, span: span.SpanContext()}
		start := time.Now()
		defer func() {
			p := recover()
			if p != nil && p != http.ErrAbortHandler {
				s.log.ErrorContext(r.Context(), "panic in handler", "route", route, "panic", p, "stack", string(debug.Stack()))
				if sw.status == 0 {
					writeError(sw, internalError("internal error; retry"))
				}
			}
			code := sw.status
			if code == 0 {
				code = http.StatusOK
			}
			tracing.EndServer(span, code)
			if p == http.ErrAbortHandler {
				panic(p)
			}
			s.metrics.HTTPRequests.WithLabelValues(route, http.StatusText(code)).Inc()
			s.log.DebugContext(r.Context(), "http", "method", r.Method, "path", r.URL.Path, "status", code, "duration_ms", time.Since(start).Milliseconds())
		}()
		h(sw, r)
	})
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() {
		writeError(w, notReady("the node is stopping"))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	for _, p := range s.ready {
		if err := p.Ping(ctx); err != nil {
			s.log.Warn("not ready", "err", err)
			writeError(w, notReady("a backend is unreachable"))
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}
