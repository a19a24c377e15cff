// Package e2b serves E2B's API on Corral's own listener, so the stock E2B
// SDKs run against Corral unchanged: the control-plane REST routes they
// call (create, get, list, kill, timeout, connect, pause, resume, metrics,
// snapshots and fork of sandboxes; snapshots.go), authenticated by the tenants' API keys sent as
// X-API-Key; the access tokens of sandboxes, E2B's sandbox ids and the
// mapping of templates to images; and the dispatch of in-sandbox traffic,
// named by the E2b-Sandbox-Id header (or a {port}-{id}.{domain} host), to
// the envd and code-interpreter services once its access token matched
// and it reached the node that owns the sandbox. Every E2B sandbox is a
// live sandbox of internal/live: there is no second engine.
package e2b

import (
	"context"
	"log/slog"
	"net/http"
	"sync"

	"github.com/corralhq/corral/internal/audit"
	"github.com/corralhq/corral/internal/live"
	"github.com/corralhq/corral/internal/ports"
	"github.com/corralhq/corral/sandbox"
)

// Ports of the in-sandbox services, as the SDKs name them.
const (
	EnvdPort   = 49983
	InterpPort = 49999
)

// DefaultEnvdVersion is the envd version answered for every sandbox: the
// SDK turns features on by it (0.3.0 stdin choice, 0.4.0 no default user,
// 0.5.2 closeStdin, 0.5.7 octet-stream uploads).
const DefaultEnvdVersion = "0.5.7"

// Keys maps API keys to tenants (*api.Auth).
type Keys interface {
	TenantOf(key string) (string, bool)
}

// Node is what the routes use of the node's own API (*api.Server): the
// cluster routing and the listing of every node's sandboxes.
type Node interface {
	// RouteSandbox reports whether this node serves r, a call about
	// tenant's sandbox id; if not, r was forwarded to the node that owns
	// it or answered (fail writes the error). forget: a delete, which
	// forgets a sandbox lost with its node (answered 204).
	RouteSandbox(w http.ResponseWriter, r *http.Request, tenant, id string, forget bool,
		fail func(w http.ResponseWriter, err error)) bool
	// Sandboxes lists tenant's live sandboxes on every node.
	Sandboxes(ctx context.Context, tenant string) ([]sandbox.Info, error)
}

// Config configures the E2B API.
type Config struct {
	// Sandboxes are this node's live sandboxes; every call about one is
	// made on the node that owns it.
	Sandboxes *live.Manager
	Keys      Keys
	Node      Node
	// Envd and Interp serve the in-sandbox traffic of ports 49983 and
	// 49999 (internal/e2b/envd, internal/e2b/interp); nil answers 502.
	Envd, Interp http.Handler
	// Domain, if set, turns on the host form of sandbox traffic
	// ({port}-{id}.{Domain}) and is answered as the sandboxes' domain.
	Domain string
	// Tier is the tier of the sandboxes made here ("" or auto: routed by
	// risk); the SDKs cannot ask for one.
	Tier sandbox.Tier
	// EnvdVersion is answered for every sandbox (DefaultEnvdVersion if
	// empty).
	EnvdVersion string
	Log         *slog.Logger
	// Audit records what each call does (internal/audit); nil records
	// nothing.
	Audit audit.Recorder
}

// Server serves the E2B API; it is an api.Extension. It is safe for
// concurrent use.
type Server struct {
	cfg Config
	// mintMu makes the lazy minting of an access token (connect to a
	// sandbox made through /v1) one at a time on this node, which owns
	// the sandbox: two connects get the same token.
	mintMu sync.Mutex
	// ports serves the traffic to other ports of a sandbox.
	ports *ports.Proxy
}

// New returns the E2B API.
func New(cfg Config) *Server {
	if cfg.EnvdVersion == "" {
		cfg.EnvdVersion = DefaultEnvdVersion
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Server{cfg: cfg, ports: ports.New(cfg.Log)}
}

// Routes registers the control-plane routes with route. Both the paths
// of the current SDKs (/v2/sandboxes for create and connect) and of older
// ones (/sandboxes) are served.
func (s *Server) Routes(route func(pattern string, h http.HandlerFunc)) {
	route("POST /sandboxes", s.authed(s.create))
	route("POST /v2/sandboxes", s.authed(s.create))
	route("GET /sandboxes", s.authed(s.listV1))
	route("GET /v2/sandboxes", s.authed(s.listV2))
	route("GET /sandboxes/{id}", s.authed(s.get))
	route("DELETE /sandboxes/{id}", s.authed(s.kill))
	route("POST /sandboxes/{id}/timeout", s.authed(s.setTimeout))
	route("POST /sandboxes/{id}/connect", s.authed(s.connect))
	route("POST /v2/sandboxes/{id}/connect", s.authed(s.connect))
	route("POST /sandboxes/{id}/pause", s.authed(s.pause))
	route("POST /sandboxes/{id}/resume", s.authed(s.resume))
	route("GET /sandboxes/{id}/metrics", s.authed(s.metrics))
	route("POST /sandboxes/{id}/snapshots", s.authed(s.createSnapshot))
	route("POST /sandboxes/{id}/fork", s.authed(s.fork))
	route("GET /snapshots", s.authed(s.listSnapshots))
	route("DELETE /templates/{templateID}", s.authed(s.deleteTemplate))
}
