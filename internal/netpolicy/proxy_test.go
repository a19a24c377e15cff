package netpolicy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

func TestNarrow(t *testing.T) {
	p := Policy{Allow: []string{"*.github.com", "pypi.org"}}
	for _, c := range []struct {
		req []string
		ok  bool
	}{
		{[]string{"api.github.com"}, true},
		{[]string{"*.api.github.com"}, true},
		{[]string{"*.github.com", "pypi.org"}, true},
		{[]string{"github.com"}, false},
		{[]string{"*.org"}, false},
		{[]string{"evil.com"}, false},
		{[]string{"*"}, false},
		{[]string{"1.2.3.4"}, false},
		{nil, false},
	} {
		_, _, err := p.Narrow(c.req)
		if (err == nil) != c.ok {
			t.Errorf("Narrow(%v) = %v", c.req, err)
		}
	}
	if _, _, err := (Policy{}).Narrow([]string{"a.com"}); err == nil {
		t.Error("an empty policy granted access")
	}
}

// proxied starts the proxy on a local listener and an upstream server the
// policy pins allowed.test to.
func proxied(t *testing.T, policy Policy, allow []string) (*Proxy, string, *httptest.Server) {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "secret=%s path=%s", r.Header.Get("X-Api-Key"), r.URL.Path)
	}))
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	host, _, _ := net.SplitHostPort(u.Host)
	policy.Resolve = map[string]string{"allowed.test": host, "other.test": host}
	p := NewProxy(policy, allow)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go p.Serve(l)
	return p, l.Addr().String(), up
}

func TestProxyAllowsInjectsAndAudits(t *testing.T) {
	policy := Policy{Allow: []string{"*.test"}, Secrets: []Secret{{Domain: "allowed.test", Header: "X-Api-Key", Value: "s3cret"}}}
	p, addr, up := proxied(t, policy, []string{"allowed.test"})
	upPort := up.Listener.Addr().(*net.TCPAddr).Port
	policy.Ports = []int{upPort}
	p.policy.Ports = []int{upPort}
	proxyURL, _ := url.Parse("http://" + addr)
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}}

	resp, err := client.Get(fmt.Sprintf("http://allowed.test:%d/hello", upPort))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "secret=s3cret path=/hello" {
		t.Errorf("allowed request got %q", b)
	}
	// Another host, even one the policy could allow, is refused; so is an
	// address.
	for _, u := range []string{fmt.Sprintf("http://other.test:%d/", upPort), fmt.Sprintf("http://127.0.0.1:%d/", upPort)} {
		resp, err := client.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s: %d", u, resp.StatusCode)
		}
	}
	// CONNECT to the allowed host works (a tunnel), to others it does not.
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "CONNECT allowed.test:%d HTTP/1.1\r\nHost: allowed.test:%d\r\n\r\n", upPort, upPort)
	br := bufio.NewReader(conn)
	status, _ := br.ReadString('\n')
	if !strings.Contains(status, "200") {
		t.Fatalf("CONNECT: %q", status)
	}
	br.ReadString('\n')
	fmt.Fprintf(conn, "GET /tunnel HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n")
	rest, _ := io.ReadAll(br)
	conn.Close()
	if !strings.Contains(string(rest), "secret= path=/tunnel") {
		t.Errorf("through the tunnel (no injection possible): %q", rest)
	}
	attempts := p.Close()
	var allowed, denied int
	for _, a := range attempts {
		if a.Allowed {
			allowed++
			if a.BytesDown == 0 {
				t.Errorf("allowed attempt without bytes: %+v", a)
			}
		} else {
			denied++
			if a.Reason == "" {
				t.Errorf("denied attempt without a reason: %+v", a)
			}
		}
	}
	if allowed != 2 || denied != 2 {
		t.Errorf("attempts %+v", attempts)
	}
}

func TestProxyRefusesPrivateResolution(t *testing.T) {
	p := NewProxy(Policy{Allow: []string{"*"}}, []string{"localhost"})
	if _, why := p.check(t.Context(), "localhost", 80); why == "" {
		t.Error("localhost allowed")
	}
	p.policy.AllowPrivate = true
	if _, why := p.check(t.Context(), "localhost", 80); why != "" {
		t.Errorf("with private allowed: %s", why)
	}
}

// TestProxyClosedBeforeServe: an execution that fails right after starting
// its proxy closes it before the serving goroutine has begun; Serve must
// not then run forever.
func TestProxyClosedBeforeServe(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := NewProxy(Policy{}, nil)
	p.Close()
	done := make(chan error, 1)
	go func() { done <- p.Serve(l) }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve after Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		l.Close()
		t.Fatal("Serve after Close still runs")
	}
	if _, err := net.Dial("tcp", l.Addr().String()); err == nil {
		t.Error("the listener still accepts after Serve returned")
	}
}
