package cluster

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/tlscert/certtest"
)

// seen is what the owner got of a forwarded request.
type seen struct {
	method, uri, host, by, auth, body string
	forwarded                         bool
}

// front serves every request by forwarding it, as node a's API does with
// the calls of a session b holds; fails records what fail was called with.
type front struct {
	*httptest.Server
	mu    sync.Mutex
	fails []error
	// served is told each time a forward is over.
	served chan struct{}
}

func newFront(t *testing.T, c *Cluster, owner Owner) *front {
	f := &front{served: make(chan struct{}, 8)}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() { f.served <- struct{}{} }()
		c.Forward(w, r, "acme", "s1", owner, func(w http.ResponseWriter, err error) {
			f.mu.Lock()
			f.fails = append(f.fails, err)
			f.mu.Unlock()
			http.Error(w, "owner unreachable", http.StatusServiceUnavailable)
		})
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *front) failed() []error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]error(nil), f.fails...)
}

func ownerAt(srv *httptest.Server) Owner {
	return Owner{Node: store.Node{ID: "b", Address: strings.TrimPrefix(srv.URL, "http://")}}
}

// TestForward: a forwarded request reaches the owner whole (method, path,
// query, body, the caller's credentials and host), marked with the
// forwarding node's id whatever the caller said; the owner's answer comes
// back whole.
func TestForward(t *testing.T) {
	got := make(chan seen, 1)
	owner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{method: r.Method, uri: r.RequestURI, host: r.Host, by: r.Header.Get(ForwardedHeader),
			auth: r.Header.Get("Authorization"), body: string(b), forwarded: Forwarded(r)}
		w.Header().Set("X-Owner", "b")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "made by b")
	}))
	t.Cleanup(owner.Close)
	a := member(t, openStore(t), nil, "a")
	f := newFront(t, a, ownerAt(owner))

	req, err := http.NewRequestWithContext(t.Context(), http.MethodPut, f.URL+"/v1/sessions/s1/files/x.txt?mode=644", strings.NewReader("payload"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer key")
	req.Header.Set(ForwardedHeader, "mallory")
	resp, err := f.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("X-Owner") != "b" || string(body) != "made by b" {
		t.Errorf("answer %d %q %q, want the owner's", resp.StatusCode, resp.Header.Get("X-Owner"), body)
	}
	s := <-got
	want := seen{method: http.MethodPut, uri: "/v1/sessions/s1/files/x.txt?mode=644", host: strings.TrimPrefix(f.URL, "http://"),
		by: "a", auth: "Bearer key", body: "payload", forwarded: true}
	if s != want {
		t.Errorf("owner got %+v\nwant %+v", s, want)
	}
	if fails := f.failed(); len(fails) != 0 {
		t.Errorf("fail called: %v", fails)
	}
	if Forwarded(httptest.NewRequest(http.MethodGet, "/", nil)) {
		t.Error("a request nobody forwarded counts as forwarded")
	}
}

// TestForwardStreams: the owner's answer is relayed as it comes (a
// download, a long call), not when it ends.
func TestForwardStreams(t *testing.T) {
	release := make(chan struct{})
	owner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A download's length is known: a proxy could hold it until
		// the end without breaking the answer.
		w.Header().Set("Content-Length", "13")
		io.WriteString(w, "first\n")
		w.(http.Flusher).Flush()
		<-release
		io.WriteString(w, "second\n")
	}))
	t.Cleanup(owner.Close)
	a := member(t, openStore(t), nil, "a")
	f := newFront(t, a, ownerAt(owner))
	// The caller reads in the background: a proxy that held the answer
	// would hold even its headers.
	lines := make(chan string, 2)
	go func() {
		defer close(lines)
		resp, err := f.Client().Get(f.URL + "/download")
		if err != nil {
			t.Error(err)
			return
		}
		defer resp.Body.Close()
		r := bufio.NewReader(resp.Body)
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				return
			}
			lines <- l
		}
	}()
	select {
	case l := <-lines:
		if l != "first\n" {
			t.Errorf("first line %q", l)
		}
	case <-time.After(patience):
		t.Error("the first part did not come before the owner's answer ended")
	}
	close(release)
	if l := <-lines; l != "second\n" {
		t.Errorf("second line %q", l)
	}
}

// TestForwardUnreachable: an owner that cannot be reached makes Forward
// call fail with a session error naming it (not lost: it may come back),
// having relayed nothing.
func TestForwardUnreachable(t *testing.T) {
	gone := httptest.NewServer(http.NotFoundHandler())
	owner := ownerAt(gone)
	gone.Close() // its address now refuses connections
	a := member(t, openStore(t), nil, "a")
	f := newFront(t, a, owner)
	resp, err := f.Client().Post(f.URL+"/v1/sessions/s1/exec", "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "owner unreachable") {
		t.Errorf("answer %d %q, want fail's", resp.StatusCode, body)
	}
	fails := f.failed()
	var se *OwnerError
	if len(fails) != 1 || !errors.As(fails[0], &se) || se.Node != "b" || se.ID != "s1" || se.Tenant != "acme" || se.Lost {
		t.Errorf("fail called with %v, want one session error for b, not lost", fails)
	}
}

// TestForwardCallerLeft: a caller that leaves before the owner answers is
// nobody's failure: fail is not called.
func TestForwardCallerLeft(t *testing.T) {
	entered := make(chan struct{}, 1)
	owner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-r.Context().Done() // the forward was abandoned
	}))
	t.Cleanup(owner.Close)
	a := member(t, openStore(t), nil, "a")
	f := newFront(t, a, ownerAt(owner))
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.URL+"/long", nil)
		resp, err := f.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	select {
	case <-entered:
	case <-time.After(patience):
		t.Fatal("the forward did not reach the owner")
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("caller's request: %v", err)
	}
	select {
	case <-f.served:
	case <-time.After(patience):
		t.Fatal("the forward did not end when its caller left")
	}
	if fails := f.failed(); len(fails) != 0 {
		t.Errorf("fail called for a caller that left: %v", fails)
	}
}

// TestForwardTLS: with PeerTLS, calls are forwarded over https to an
// owner whose certificate the configured CA signed; an owner whose
// certificate another CA signed, or that serves plain http, is not
// reached: fail is called, nothing of the owner's is relayed.
func TestForwardTLS(t *testing.T) {
	ca := certtest.NewCA(t)
	tlsOwner := func(ca *certtest.CA) *httptest.Server {
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "owner over "+map[bool]string{true: "https", false: "http"}[r.TLS != nil])
		}))
		pair := ca.Issue(t, "", time.Time{})
		cert, err := tls.X509KeyPair(pair.Cert, pair.Key)
		if err != nil {
			t.Fatal(err)
		}
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
		srv.StartTLS()
		t.Cleanup(srv.Close)
		return srv
	}
	at := func(srv *httptest.Server) Owner {
		_, addr, _ := strings.Cut(srv.URL, "://")
		return Owner{Node: store.Node{ID: "b", Address: addr}}
	}
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "owner over http") }))
	t.Cleanup(plain.Close)
	for _, c := range []struct {
		name  string
		owner *httptest.Server
		want  string // the owner's answer; "" for none
	}{
		{"trusted", tlsOwner(ca), "owner over https"},
		{"another CA", tlsOwner(certtest.NewCA(t)), ""},
		{"plain http", plain, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := New(Config{ID: "a", Address: "a.test:7000", Heartbeat: heartbeat, LostAfter: lostAfter,
				PeerTLS: &tls.Config{RootCAs: ca.Pool()}}, openStore(t), testLog(t))
			f := newFront(t, a, at(c.owner))
			resp, err := f.Client().Get(f.URL + "/v1/sandboxes/s1")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			fails := f.failed()
			var oe *OwnerError
			switch {
			case c.want != "" && (resp.StatusCode != http.StatusOK || string(body) != c.want || len(fails) != 0):
				t.Errorf("answer %d %q (fails %v), want the owner's %q", resp.StatusCode, body, fails, c.want)
			case c.want == "" && (resp.StatusCode != http.StatusServiceUnavailable || len(fails) != 1 || !errors.As(fails[0], &oe)):
				t.Errorf("answer %d %q (fails %v), want fail's with an owner error", resp.StatusCode, body, fails)
			}
		})
	}
}
