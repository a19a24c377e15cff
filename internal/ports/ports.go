// Package ports serves HTTP to the TCP ports of live sandboxes: a reverse
// proxy whose connections are tunnels through each sandbox's agent
// (live.Sandbox.DialPort), for E2B's in-sandbox traffic to ports other
// than envd's and the code interpreter's (internal/e2b) and for /v1's
// /v1/sandboxes/{id}/ports/{port}/… (internal/api). HTTP/1.1, responses
// streamed as they come, WebSocket (any Upgrade) spliced to the tunnel.
// Who may call is decided before it, by each wire; what reaches the
// sandbox carries none of Corral's credentials.
package ports

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/corralhq/corral/internal/fault"
	"github.com/corralhq/corral/internal/live"
)

// MaxPath bounds the path a request names in the sandbox.
const MaxPath = 4096

// ErrFailed: the server on the port took the connection but ended it, or
// broke it, without a whole answer. Its code is answered 502 on every
// wire, as live.ErrPortClosed's.
var ErrFailed = &fault.Error{Kind: fault.Unavailable, Code: "port_failed",
	Message: "the server on this port of the sandbox ended the connection without a whole answer"}

// credentials are the headers a request through Corral carries to reach a
// sandbox's port (E2B's dispatch headers and access tokens, the node
// forward's mark); none reaches the sandbox.
var credentials = []string{"X-Access-Token", "E2b-Traffic-Access-Token", "E2b-Sandbox-Id", "E2b-Sandbox-Port",
	"Corral-Forwarded-By"}

// Proxy serves requests to sandboxes' ports. It keeps idle connections
// (tunnels) per sandbox and port for 30 s, as a browser's next request
// usually comes soon; they end then, or with their sandbox. It is safe for
// concurrent use.
type Proxy struct {
	transport *http.Transport
	log       *slog.Logger
}

// target is where a request goes, in its context for the transport's
// dial.
type target struct {
	sb   *live.Sandbox
	port int
}

type targetKey struct{}

// New returns a proxy; log receives what a caller is not told.
func New(log *slog.Logger) *Proxy {
	t := &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			tg, ok := ctx.Value(targetKey{}).(target)
			if !ok {
				return nil, errors.New("ports: a dial without its sandbox")
			}
			// Without waiting for the connection: the request follows
			// the dial on the agent's stream (live.Sandbox.OpenPort).
			return tg.sb.OpenPort(ctx, tg.port)
		},
		MaxIdleConnsPerHost: 8,
		IdleConnTimeout:     30 * time.Second,
		// Servers in sandboxes speak plain HTTP/1.1.
		ForceAttemptHTTP2: false,
	}
	return &Proxy{transport: t, log: log}
}

// Request is one request to serve to a sandbox's port.
type Request struct {
	Sandbox *live.Sandbox
	Port    int
	// Path is the path in the sandbox (from "/"), escaped as on the
	// wire; the request's query goes with it. CheckPath has checked it.
	Path string
	// Strip names headers dropped besides Corral's own (/v1: its API
	// key's Authorization).
	Strip []string
	// Fail answers an error before anything was relayed, by the wire's
	// table: live.ErrPortClosed, ErrFailed, the sandbox's own (paused,
	// gone).
	Fail func(http.ResponseWriter, error)
}

// CheckPath checks a path a request names in a sandbox, escaped as on the
// wire: at most MaxPath bytes, well escaped, no NUL, no dot-dot segment (a
// proxy passes no path that could mean another than the one it shows).
func CheckPath(escaped string) error {
	p, err := url.PathUnescape(escaped)
	if err != nil {
		return fault.Invalid("path", "the path is not a well-escaped URL path")
	}
	if len(escaped) > MaxPath {
		return fault.Invalid("path", "a path in the sandbox is at most %d bytes", MaxPath)
	}
	if strings.ContainsRune(p, 0) {
		return fault.Invalid("path", "a path holds no NUL")
	}
	for seg := range strings.SplitSeq(p, "/") {
		if seg == ".." {
			return fault.Invalid("path", "a path in the sandbox has no '..' segment")
		}
	}
	return nil
}

// Port parses a port number in a request.
func Port(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != s {
		return 0, fault.Invalid("port", "a port is a number from 1 to 65535")
	}
	return n, nil
}

// Serve serves r to the port. The Host header goes as the client sent it
// (dev servers check it); the connection pool's key is the sandbox and
// port.
func (p *Proxy) Serve(w http.ResponseWriter, r *http.Request, req Request) {
	key := poolKey(req.Sandbox, req.Port)
	ctx := context.WithValue(r.Context(), targetKey{}, target{sb: req.Sandbox, port: req.Port})
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = key
			// CheckPath has checked it unescapes.
			pr.Out.URL.Path, _ = url.PathUnescape(req.Path)
			pr.Out.URL.RawPath = req.Path
			pr.Out.Host = pr.In.Host
			for _, h := range credentials {
				pr.Out.Header.Del(h)
			}
			for _, h := range req.Strip {
				pr.Out.Header.Del(h)
			}
			pr.SetXForwarded()
		},
		Transport:     p.transport,
		FlushInterval: -1, // stream as it comes: server-sent events, logs
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			var f fault.Faulter
			switch {
			case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
				// The caller left: no answer at all.
				panic(http.ErrAbortHandler)
			case errors.As(err, &f):
				req.Fail(w, err) // the sandbox's: port closed, paused, gone
			default:
				p.log.Info("a sandbox's port failed", "sandbox", req.Sandbox.ID(), "port", req.Port, "err", err)
				req.Fail(w, fmt.Errorf("port %d: %w", req.Port, ErrFailed.With("",
					"the server on port %d of the sandbox ended the connection without a whole answer", req.Port)))
			}
		},
	}
	rp.ServeHTTP(w, r.WithContext(ctx))
}

// poolKey names a sandbox's port for the connection pool: a host name
// that tells sandboxes (of any tenant) and ports apart.
func poolKey(sb *live.Sandbox, port int) string {
	h := sha256.Sum256([]byte(sb.Tenant() + "\x00" + sb.ID()))
	return hex.EncodeToString(h[:12]) + ".sandbox:" + strconv.Itoa(port)
}
