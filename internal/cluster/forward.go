package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/corralhq/corral/internal/fault"
	"github.com/corralhq/corral/internal/httpbody"
	"github.com/corralhq/corral/internal/tracing"
)

// ForwardedHeader marks a request one node forwarded to another, naming
// the sender: the receiver serves it itself, whatever it thinks of the
// owner, so a request is forwarded once at most. A client that
// sets it only keeps its request on the node it reached.
const ForwardedHeader = "Corral-Forwarded-By"

// Forwarded reports whether r came from another node.
func Forwarded(r *http.Request) bool { return r.Header.Get(ForwardedHeader) != "" }

// dialTimeout bounds connecting to the owner of an id: a node that is
// gone refuses at once, one that is cut off must not hold the caller.
const dialTimeout = 2 * time.Second

// plainTransport carries the forwarded calls of the clusters whose nodes
// serve http: one for all of them, as each owner is one host.
var plainTransport = &http.Transport{
	Proxy:                 nil,
	DialContext:           (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext,
	MaxIdleConnsPerHost:   32,
	IdleConnTimeout:       90 * time.Second,
	TLSHandshakeTimeout:   dialTimeout,
	ResponseHeaderTimeout: 0, // a sandbox's call may take as long as it takes
}

// forwardTransport carries forwarded calls: over https verified with
// peer, or over http if peer is nil. It speaks HTTP/1.1 either way, so
// that upgraded connections (WebSocket) pass through.
func forwardTransport(peer *tls.Config) *http.Transport {
	if peer == nil {
		return plainTransport
	}
	t := plainTransport.Clone()
	t.TLSClientConfig = peer.Clone()
	return t
}

// Forward sends r to the owner of id and relays its answer to w, with
// the caller's own credentials (every node knows every tenant's keys). If
// the owner cannot be reached, nothing was relayed and fail is called with
// a *OwnerError that says so.
func (c *Cluster) Forward(w http.ResponseWriter, r *http.Request, tenant, id string, owner Owner, fail func(http.ResponseWriter, error)) {
	target := &url.URL{Scheme: "http", Host: owner.Node.Address}
	if c.cfg.PeerTLS != nil {
		target.Scheme = "https"
	}
	// The owner's spans join the caller's trace under this one.
	ctx, span := tracing.Start(r.Context(), "forward", trace.WithSpanKind(trace.SpanKindClient))
	defer span.End()
	if span.IsRecording() {
		span.SetAttributes(attribute.String("corral.node", owner.Node.ID), attribute.String("corral.id", id))
		r = r.WithContext(ctx)
	}
	p := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = pr.In.Host
			pr.Out.Header.Set(ForwardedHeader, c.cfg.ID)
			tracing.Inject(pr.Out.Context(), pr.Out.Header)
			if pr.Out.Body != nil && pr.Out.Body != http.NoBody {
				// The caller's body cut short is the caller's fault,
				// not a sign that the owner is not answering.
				pr.Out.Body = callerBody{Reader: httpbody.Limit(pr.Out.Body, -1), Closer: pr.Out.Body}
			}
		},
		Transport: c.forward,
		ModifyResponse: func(resp *http.Response) error {
			tracing.Status(span, resp.StatusCode)
			return nil
		},
		FlushInterval: -1, // stream downloads as they come
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			var f fault.Faulter
			switch {
			case errors.As(err, &f):
				fail(w, err) // the caller's body could not be read (httpbody)
				return
			case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
				// The caller left: no answer at all, rather than the
				// empty 200 a handler that writes nothing is sent as.
				panic(http.ErrAbortHandler)
			}
			span.SetStatus(codes.Error, err.Error())
			c.log.WarnContext(r.Context(), "forward to the owner", "id", id, "node", owner.Node.ID, "err", err)
			fail(w, &OwnerError{Tenant: tenant, ID: id, Node: owner.Node.ID})
		},
	}
	p.ServeHTTP(w, r)
}

// callerBody is a forwarded request's body, read through httpbody so that
// an error reading it is told apart from the owner's.
type callerBody struct {
	io.Reader
	io.Closer
}
