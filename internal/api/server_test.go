package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	localblob "github.com/corralhq/corral/internal/blob/local"
)

// pinger is a readiness check a test turns off.
type pinger struct{ down atomic.Bool }

func (p *pinger) Ping(context.Context) error {
	if p.down.Load() {
		return errors.New("unreachable")
	}
	return nil
}

// TestHealth: /healthz answers while the process lives; /readyz while
// every backend answers and until the node drains; /metrics counts the
// calls by route and status; / leads to the dashboard; an unknown path is
// a JSON 404.
func TestHealth(t *testing.T) {
	backend := &pinger{}
	s := newStack(t, func(o *options) { o.idle = true; o.ready = []Pinger{backend} })
	s.call("", "GET", "/healthz", "", http.StatusOK, nil)
	s.call("", "GET", "/readyz", "", http.StatusOK, nil)
	backend.down.Store(true)
	s.fail("", "GET", "/readyz", "", http.StatusServiceUnavailable, "not_ready")
	backend.down.Store(false)
	s.call("", "GET", "/readyz", "", http.StatusOK, nil)
	s.srv.Drain()
	s.fail("", "GET", "/readyz", "", http.StatusServiceUnavailable, "not_ready")
	// A draining node still answers everything else.
	s.call("", "GET", "/healthz", "", http.StatusOK, nil)
	s.call(keyAlpha, "GET", "/v1/executions", "", http.StatusOK, nil)

	s.fail(keyAlpha, "GET", "/v1/nothing-here", "", http.StatusNotFound, "not_found")
	s.fail("", "DELETE", "/healthz", "", http.StatusNotFound, "not_found")
	r := s.call("", "GET", "/", "", http.StatusFound, nil)
	if loc := r.header.Get("Location"); loc != "/ui/" {
		t.Errorf("/ redirects to %q", loc)
	}
	s.call("", "GET", "/ui/", "", http.StatusOK, nil)
	r = s.call("", "GET", "/metrics", "", http.StatusOK, nil)
	for _, want := range []string{
		`corral_http_requests_total{code="Service Unavailable",route="GET /readyz"} 2`,
		`corral_http_requests_total{code="OK",route="GET /v1/executions"} 1`,
	} {
		if !strings.Contains(string(r.body), want) {
			t.Errorf("/metrics has no %s", want)
		}
	}
}

// testExt is an extension: a route of its own, one that panics, and the
// traffic named by a header.
type testExt struct{}

func (testExt) Routes(route func(string, http.HandlerFunc)) {
	route("GET /ext/ping", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("pong")) })
	route("GET /ext/panic", func(http.ResponseWriter, *http.Request) { panic("a bug") })
}

func (testExt) Traffic(r *http.Request) bool { return r.Header.Get("X-Ext-Traffic") != "" }

func (testExt) ServeTraffic(w http.ResponseWriter, r *http.Request) {
	w.WriteHeader(http.StatusAccepted)
	_, _ = w.Write([]byte("traffic " + r.URL.Path))
}

// TestExtension: an extension's routes are served beside /v1, its
// traffic before any route (whatever the path), and a handler's panic
// is a JSON 500 that says nothing of it.
func TestExtension(t *testing.T) {
	s := newStack(t, func(o *options) { o.idle = true; o.ext = []Extension{testExt{}} })
	if r := s.call("", "GET", "/ext/ping", "", http.StatusOK, nil); string(r.body) != "pong" {
		t.Errorf("/ext/ping: %q", r.body)
	}
	if r := s.call("", "GET", "/v1/executions", "", http.StatusAccepted, nil, "X-Ext-Traffic", "1"); string(r.body) != "traffic /v1/executions" {
		t.Errorf("the extension's traffic: %q", r.body)
	}
	s.call(keyAlpha, "GET", "/v1/executions", "", http.StatusOK, nil)
	e, _ := s.fail("", "GET", "/ext/panic", "", http.StatusInternalServerError, "internal")
	if strings.Contains(e.Message, "a bug") {
		t.Errorf("the panic reached the client: %q", e.Message)
	}
	if !strings.Contains(s.logs.String(), "a bug") {
		t.Error("the panic was not logged")
	}
	// Without the extension, its paths are the API's 404.
	plain := newStack(t, func(o *options) { o.idle = true })
	plain.fail("", "GET", "/ext/ping", "", http.StatusNotFound, "not_found")
}

// TestBlobLinks: artifact links the local blob store signs are served
// without an API key; a link altered is refused.
func TestBlobLinks(t *testing.T) {
	// The links name a base URL of their own; the test calls their path.
	const base = "http://corral.invalid"
	var bs *localblob.Store
	s := newStack(t, func(o *options) {
		o.idle = true
		var err error
		bs, err = localblob.New(t.TempDir(), base, nil, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { bs.Close() })
		o.blobs = bs.Handler()
	})
	if _, err := bs.Put(t.Context(), "t/e/out.txt", strings.NewReader("artifact"), 8, "text/plain"); err != nil {
		t.Fatal(err)
	}
	link, _, err := bs.SignedURL(t.Context(), "t/e/out.txt", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	path := strings.TrimPrefix(link, base)
	if r := s.call("", "GET", path, "", http.StatusOK, nil); string(r.body) != "artifact" {
		t.Errorf("the link serves %q", r.body)
	}
	s.call("", "HEAD", path, "", http.StatusOK, nil)
	u, err := url.Parse(path)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("expires", "9999999999")
	u.RawQuery = q.Encode()
	if r := s.do("", "GET", u.String(), ""); r.status < 400 || r.status == http.StatusUnauthorized {
		t.Errorf("an altered link: %d %s", r.status, r.body)
	}
	// Without a local blob store there is no such route.
	plain := newStack(t, func(o *options) { o.idle = true })
	plain.fail("", "GET", path, "", http.StatusNotFound, "not_found")
}
