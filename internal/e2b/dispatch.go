package e2b

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/corralhq/corral/internal/audit"
	"github.com/corralhq/corral/internal/e2b/target"
	"github.com/corralhq/corral/internal/fault"
	"github.com/corralhq/corral/internal/live"
	"github.com/corralhq/corral/internal/ports"
	"github.com/corralhq/corral/internal/validate"
)

// In-sandbox traffic: the SDKs send every call made inside a sandbox
// either to one URL with the headers E2b-Sandbox-Id and E2b-Sandbox-Port
// (E2B_SANDBOX_URL set: no wildcard DNS), or to https://{port}-{id}.{domain}.
// Either carries the sandbox's access token as X-Access-Token, and no API
// key.

// gone answers in-sandbox traffic for a sandbox that is not there (or not
// the token's tenant's): 502, as E2B's own proxy answers for a sandbox it
// does not know, which the SDKs read as gone (isRunning false,
// SandboxNotFoundError from a command).
const gone = http.StatusBadGateway

// closed answers in-sandbox traffic whose token does not open sandbox id,
// whatever the reason: a wrong token, another tenant's, one for an id that
// is not (or no longer) there, a sandbox that has no token. One answer, to
// the byte, so that it tells nobody which ids exist: a sandbox gone, as a
// genuine token of a killed sandbox must get it (its token went with it,
// so a forged token and a stale one cannot be told apart).
func closed(w http.ResponseWriter, id string) {
	target.WriteError(w, gone, fmt.Sprintf("sandbox '%s' not found", id))
}

// Traffic reports whether r is in-sandbox traffic rather than a
// control-plane call.
func (s *Server) Traffic(r *http.Request) bool {
	if r.Header.Get("E2b-Sandbox-Id") != "" {
		return true
	}
	_, _, ok := s.hostTarget(r.Host)
	return ok
}

// hostTarget reads the port and sandbox id of a {port}-{id}.{domain} host.
func (s *Server) hostTarget(host string) (port int, id string, ok bool) {
	if s.cfg.Domain == "" {
		return 0, "", false
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	label, ok := strings.CutSuffix(strings.ToLower(host), "."+strings.ToLower(s.cfg.Domain))
	if !ok || strings.Contains(label, ".") {
		return 0, "", false
	}
	p, id, ok := strings.Cut(label, "-")
	if !ok || id == "" {
		return 0, "", false
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 1 || port > 65535 {
		return 0, "", false
	}
	return port, id, true
}

// ServeTraffic serves in-sandbox traffic: the access token names the
// tenant, the call goes to the node that owns the sandbox, which checks
// the token and hands the call, its Target in the context, to the service
// of its port: envd's and the code interpreter's are Corral's own, any
// other is the sandbox's (servePort).
func (s *Server) ServeTraffic(w http.ResponseWriter, r *http.Request) {
	// Without E2b-Sandbox-Port, the call is envd's (the SDKs always send
	// it).
	port, id := EnvdPort, r.Header.Get("E2b-Sandbox-Id")
	if id != "" {
		if p := r.Header.Get("E2b-Sandbox-Port"); p != "" {
			n, err := strconv.Atoi(p)
			if err != nil || n < 1 || n > 65535 {
				refuse(w, fault.InvalidArgument, "E2b-Sandbox-Port is a port number")
				return
			}
			port = n
		}
	} else {
		var ok bool
		if port, id, ok = s.hostTarget(r.Host); !ok {
			refuse(w, fault.NotFound, "no sandbox is named by this request")
			return
		}
	}
	if port != EnvdPort && port != InterpPort {
		s.servePort(w, r, id, port)
		return
	}
	token := r.Header.Get("X-Access-Token")
	if token == "" {
		// The code interpreter's context calls send only this one.
		token = r.Header.Get("E2B-Traffic-Access-Token")
	}
	if token == "" {
		refuse(w, fault.Unauthenticated, "send the sandbox's access token (envdAccessToken) as X-Access-Token")
		return
	}
	tenant, ok := tokenTenant(token)
	if !ok {
		refuse(w, fault.Unauthenticated, "the access token is not one this server made")
		return
	}
	if !validate.ValidID(id) {
		closed(w, id)
		return
	}
	if !s.cfg.Node.RouteSandbox(w, r, tenant, id, false, s.fail) {
		return
	}
	sb, err := s.cfg.Sandboxes.Get(tenant, id)
	var want string
	if err == nil {
		want, err = sb.AccessToken()
	}
	switch {
	case errors.Is(err, live.ErrNotFound), err == nil && !tokenMatches(token, want):
		closed(w, id)
		return
	case err != nil:
		s.fail(w, err)
		return
	}
	h := s.cfg.Envd
	if port == InterpPort {
		h = s.cfg.Interp
	}
	if h == nil {
		target.WriteError(w, http.StatusBadGateway, fmt.Sprintf("the service of port %d is not available on this server", port))
		return
	}
	ctx := audit.WithSandbox(audit.With(r.Context(), s.cfg.Audit, audit.Actor{Tenant: tenant, KeyID: audit.TokenID(token)}), id)
	h.ServeHTTP(w, r.WithContext(target.With(ctx, target.Target{Tenant: tenant, SandboxID: id})))
}

// tokenMatches compares an access token with the sandbox's in constant
// time (of their hashes, so not even the length shows); a sandbox without
// a token matches none.
func tokenMatches(got, want string) bool {
	if want == "" {
		return false
	}
	g, h := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(g[:], h[:]) == 1
}

// forbidden answers traffic to a sandbox's port without a token it could
// take (none, or one of no tenant's shape): 403, as E2B's edge answers a
// missing traffic token.
func forbidden(w http.ResponseWriter, msg string) {
	target.WriteError(w, http.StatusForbidden, msg)
}

// servePort serves traffic to a port other than envd's and the code
// interpreter's: a server a program started in the sandbox
// (internal/ports). The token is the sandbox's traffic access token
// (E2B-Traffic-Access-Token; X-Access-Token too, the same token here);
// a sandbox made with public ports (network.allowPublicTraffic) takes
// none. Without a token, only this node's public sandboxes are found:
// the token's tenant is what routes a call to its owner node. A missing
// or malformed token is 403 (whether the sandbox exists or not); a token
// that does not open the sandbox is answered as for envd, as a sandbox
// gone (502), so that no answer tells which ids exist.
func (s *Server) servePort(w http.ResponseWriter, r *http.Request, id string, port int) {
	if err := ports.CheckPath(r.URL.EscapedPath()); err != nil {
		s.portFail(w, err)
		return
	}
	token := r.Header.Get("E2B-Traffic-Access-Token")
	if token == "" {
		token = r.Header.Get("X-Access-Token")
	}
	if token == "" {
		if sb, ok := s.cfg.Sandboxes.Public(id); ok {
			s.proxy(w, r, sb, port)
			return
		}
		forbidden(w, "this sandbox's ports take its traffic access token: send the trafficAccessToken its create answered "+
			"as the E2B-Traffic-Access-Token header (or create it with network.allowPublicTraffic: true)")
		return
	}
	tenant, ok := tokenTenant(token)
	if !ok {
		forbidden(w, "the traffic access token is not one this server made")
		return
	}
	if !validate.ValidID(id) {
		closed(w, id)
		return
	}
	if !s.cfg.Node.RouteSandbox(w, r, tenant, id, false, s.portFail) {
		return
	}
	sb, err := s.cfg.Sandboxes.Get(tenant, id)
	var want string
	if err == nil {
		want, err = sb.AccessToken()
	}
	switch {
	case errors.Is(err, live.ErrNotFound):
		closed(w, id)
		return
	case err != nil:
		s.portFail(w, err)
		return
	case !tokenMatches(token, want) && !sb.PublicPorts():
		// As envd's: the same answer whether the sandbox exists or not.
		closed(w, id)
		return
	}
	s.proxy(w, r, sb, port)
}

func (s *Server) proxy(w http.ResponseWriter, r *http.Request, sb *live.Sandbox, port int) {
	s.ports.Serve(w, r, ports.Request{Sandbox: sb, Port: port, Path: r.URL.EscapedPath(), Fail: s.portFail})
}

// portFail answers an error of traffic to a sandbox's port by the
// in-sandbox table (a port nothing listens on: 502).
func (s *Server) portFail(w http.ResponseWriter, err error) {
	f := fault.Of(err)
	if f.Kind == fault.Internal {
		s.cfg.Log.Error("sandbox port traffic", "err", err)
	}
	target.Answer(w, target.Statuses, f)
}
