package api

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// portServer is a server "in" a fake sandbox: the fake sandbox's agent
// runs on the host, so its loopback is the host's. It answers /hello with
// what it got, streams /stream, and upgrades /ws to a line echo.
func portServer(t *testing.T) int {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s?%s auth=%q token=%q", r.Method, r.URL.EscapedPath(), r.URL.RawQuery,
			r.Header.Get("Authorization"), r.Header.Get("X-Access-Token"))
	})
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		for i := range 3 {
			fmt.Fprintf(w, "part %d\n", i)
			w.(http.Flusher).Flush()
			time.Sleep(100 * time.Millisecond)
		}
	})
	mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "echo" {
			http.Error(w, "upgrade to echo", http.StatusBadRequest)
			return
		}
		c, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		rw.Flush()
		for {
			line, err := rw.ReadString('\n')
			if err != nil {
				return
			}
			rw.WriteString("echo " + line)
			rw.Flush()
		}
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().(*net.TCPAddr).Port
}

// upgrade opens an upgraded connection to path on the stack's listener
// and checks a round trip of two lines.
func upgrade(t *testing.T, s *stack, path string) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(patience))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: corral\r\nAuthorization: Bearer %s\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n", path, keyAlpha)
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	if err != nil || res.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade %s: %v %v", path, res, err)
	}
	for _, line := range []string{"one\n", "two\n"} {
		io.WriteString(c, line)
		got, err := br.ReadString('\n')
		if err != nil || got != "echo "+line {
			t.Fatalf("upgraded %s: %q, %v", path, got, err)
		}
	}
}

// TestSandboxPorts: /v1/sandboxes/{id}/ports/{port}/… reaches a server in
// the sandbox with its path and query, without the API key; streams as it
// comes; upgrades; through the node that owns the sandbox and another;
// refuses without a key, another tenant, a closed port (502 port_closed),
// bad ports and paths.
func TestSandboxPorts(t *testing.T) {
	w := newWorld(t)
	a := w.stack(func(o *options) { o.id = "node-a" })
	b := w.stack(func(o *options) { o.id = "node-b" })
	a.call(keyAlpha, "POST", "/v1/sandboxes", `{"sandbox_id":"box"}`, http.StatusCreated, nil)
	port := portServer(t)
	base := fmt.Sprintf("/v1/sandboxes/box/ports/%d", port)
	for _, s := range []*stack{a, b} {
		r := s.call(keyAlpha, "POST", base+"/hello?x=1&y=%2F", "", http.StatusOK, nil, "X-Access-Token", "t")
		if want := `POST /hello?x=1&y=%2F auth="" token=""`; string(r.body) != want {
			t.Errorf("through %s: %q, want %q", s.url, r.body, want)
		}
		r = s.call(keyAlpha, "GET", base+"/stream", "", http.StatusOK, nil)
		if string(r.body) != "part 0\npart 1\npart 2\n" {
			t.Errorf("stream: %q", r.body)
		}
		upgrade(t, s, base+"/ws")
	}
	a.fail("", "GET", base+"/hello", "", http.StatusUnauthorized, "unauthorized")
	a.fail(keyBeta, "GET", base+"/hello", "", http.StatusNotFound, "not_found")
	closed := func() int {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port
	}()
	for _, s := range []*stack{a, b} {
		e, _ := s.fail(keyAlpha, "GET", fmt.Sprintf("/v1/sandboxes/box/ports/%d/", closed), "", http.StatusBadGateway, "port_closed")
		if !strings.Contains(e.Message, "nothing listens on port") {
			t.Errorf("closed port: %q", e.Message)
		}
	}
	a.fail(keyAlpha, "GET", "/v1/sandboxes/box/ports/0/", "", http.StatusBadRequest, "invalid_request")
	a.fail(keyAlpha, "GET", "/v1/sandboxes/box/ports/x/", "", http.StatusBadRequest, "invalid_request")
	a.fail(keyAlpha, "GET", base+"/a/%2E%2E/b", "", http.StatusBadRequest, "invalid_request")
	a.fail(keyAlpha, "GET", base+"/%00", "", http.StatusBadRequest, "invalid_request")
}

// TestSandboxPortsRoot: a port's root without its slash is redirected to
// it, so relative links in its pages resolve under the route.
func TestSandboxPortsRoot(t *testing.T) {
	s := newStack(t)
	s.call(keyAlpha, "POST", "/v1/sandboxes", `{"sandbox_id":"box"}`, http.StatusCreated, nil)
	r := s.do(keyAlpha, "GET", "/v1/sandboxes/box/ports/8000", "")
	if r.status/100 != 3 || r.header.Get("Location") != "/v1/sandboxes/box/ports/8000/" {
		t.Errorf("GET the port's root without a slash: %d %s, Location %q", r.status, r.body, r.header.Get("Location"))
	}
}
