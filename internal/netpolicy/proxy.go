package netpolicy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Attempt is one connection a sandbox asked the proxy for.
type Attempt struct {
	Time    time.Time `json:"time"`
	Method  string    `json:"method"` // CONNECT, or the HTTP method of a plain request
	Host    string    `json:"host"`
	Port    int       `json:"port"`
	Allowed bool      `json:"allowed"`
	// Reason says why it was refused (or "" when allowed).
	Reason string `json:"reason,omitempty"`
	// Address is the address connected to.
	Address   string `json:"address,omitempty"`
	Status    int    `json:"status,omitempty"` // plain HTTP: the upstream status
	BytesUp   int64  `json:"bytes_up"`
	BytesDown int64  `json:"bytes_down"`
	// Injected names the secret headers the proxy added (never their
	// values).
	Injected []string `json:"injected,omitempty"`
}

// Proxy is the egress proxy of one execution: an HTTP proxy (plain
// requests and CONNECT) that reaches only the allowed domains, on allowed
// ports, at public addresses (after resolution), injects the policy's
// secret headers into plain HTTP requests, and records every attempt.
type Proxy struct {
	policy   Policy
	allow    []string
	resolver *net.Resolver
	now      func() time.Time

	mu       sync.Mutex
	observe  func(Attempt) // Observe's; nil: none
	attempts []Attempt
	conns    map[net.Conn]struct{}
	closed   bool
	srv      *http.Server
	wg       sync.WaitGroup
}

// MaxAttempts caps the attempts recorded for one execution; later ones are
// counted in the last entry's place.
const MaxAttempts = 10000

// NewProxy returns a proxy granting allow (already narrowed by the policy).
func NewProxy(policy Policy, allow []string) *Proxy {
	return &Proxy{policy: policy, allow: allow, resolver: net.DefaultResolver, now: time.Now, conns: map[net.Conn]struct{}{}}
}

// Serve answers proxy requests on l until Close, which may come first:
// then Serve closes l and returns at once.
func (p *Proxy) Serve(l net.Listener) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		l.Close()
		return nil
	}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 30 * time.Second,
		ConnState: func(c net.Conn, s http.ConnState) {
			p.mu.Lock()
			defer p.mu.Unlock()
			switch s {
			case http.StateNew:
				p.conns[c] = struct{}{}
			case http.StateClosed, http.StateHijacked:
				delete(p.conns, c)
			}
		}}
	srv := p.srv
	p.mu.Unlock()
	err := srv.Serve(l)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Close stops the proxy, cuts open tunnels and returns every attempt.
func (p *Proxy) Close() []Attempt {
	p.mu.Lock()
	p.closed = true
	srv := p.srv
	for c := range p.conns {
		c.Close() // tunnels: hijacked connections the server no longer owns
	}
	p.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Attempt(nil), p.attempts...)
}

func (p *Proxy) record(a Attempt) {
	p.mu.Lock()
	if len(p.attempts) < MaxAttempts {
		p.attempts = append(p.attempts, a)
	}
	observe := p.observe
	p.mu.Unlock()
	if observe != nil {
		observe(a)
	}
}

// Observe makes f see every attempt as it is decided and done (the
// audit trail), beyond MaxAttempts too. f must not block.
func (p *Proxy) Observe(f func(Attempt)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.observe = f
}

// check decides host:port and resolves it; it returns the address to dial
// or why not.
func (p *Proxy) check(ctx context.Context, host string, port int) (netip.AddrPort, string) {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if _, err := netip.ParseAddr(host); err == nil {
		return netip.AddrPort{}, "addresses are not allowed; use a domain name"
	}
	allowed := false
	for _, a := range p.allow {
		if Match(a, host) {
			allowed = true
			break
		}
	}
	if !allowed {
		return netip.AddrPort{}, "domain not in the allowlist"
	}
	if !p.policy.port(port) {
		return netip.AddrPort{}, fmt.Sprintf("port %d not allowed", port)
	}
	if pinned, ok := p.policy.Resolve[host]; ok {
		addr, err := netip.ParseAddr(pinned)
		if err != nil {
			return netip.AddrPort{}, "bad pinned address"
		}
		return netip.AddrPortFrom(addr, uint16(port)), ""
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	addrs, err := p.resolver.LookupNetIP(ctx, "ip", host)
	if err != nil || len(addrs) == 0 {
		return netip.AddrPort{}, "name does not resolve"
	}
	// Every answer must be public, or a rebinding answer could slip in.
	for _, a := range addrs {
		if !p.policy.AllowPrivate && !Public(a) {
			return netip.AddrPort{}, fmt.Sprintf("resolves to a non-public address (%s)", a.Unmap())
		}
	}
	return netip.AddrPortFrom(addrs[0].Unmap(), uint16(port)), ""
}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.wg.Add(1)
	defer p.wg.Done()
	if r.Method == http.MethodConnect {
		p.connect(w, r)
		return
	}
	p.forward(w, r)
}

func splitHostPort(hostport string, def int) (string, int, error) {
	host, ps, err := net.SplitHostPort(hostport)
	if err != nil {
		return hostport, def, nil // a host without a port
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port <= 0 || port > 65535 {
		return "", 0, fmt.Errorf("bad port %q", ps)
	}
	return host, port, nil
}

// admit decides an attempt to reach hostport (defPort if it names none):
// the address to dial, or false after recording the refusal in a and
// answering w.
func (p *Proxy) admit(w http.ResponseWriter, r *http.Request, a *Attempt, hostport string, defPort int) (netip.AddrPort, bool) {
	host, port, err := splitHostPort(hostport, defPort)
	a.Host, a.Port = host, port
	if err != nil {
		a.Reason = err.Error()
		p.record(*a)
		http.Error(w, a.Reason, http.StatusBadRequest)
		return netip.AddrPort{}, false
	}
	addr, why := p.check(r.Context(), host, port)
	if why != "" {
		a.Reason = why
		p.record(*a)
		http.Error(w, "corral egress: "+why, http.StatusForbidden)
		return netip.AddrPort{}, false
	}
	return addr, true
}

// connect opens a tunnel (HTTPS and anything else over CONNECT).
func (p *Proxy) connect(w http.ResponseWriter, r *http.Request) {
	a := Attempt{Time: p.now().UTC(), Method: http.MethodConnect}
	addr, ok := p.admit(w, r, &a, r.Host, 443)
	if !ok {
		return
	}
	upstream, err := (&net.Dialer{Timeout: 10 * time.Second}).DialContext(r.Context(), "tcp", addr.String())
	if err != nil {
		a.Reason = "connect failed"
		a.Address = addr.String()
		p.record(a)
		http.Error(w, "corral egress: connect failed", http.StatusBadGateway)
		return
	}
	defer upstream.Close()
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "no tunnel", http.StatusInternalServerError)
		return
	}
	client, buf, err := hj.Hijack()
	if err != nil {
		return
	}
	defer client.Close()
	p.track(client, upstream)
	a.Allowed, a.Address = true, addr.String()
	if _, err := client.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		p.record(a)
		return
	}
	a.BytesUp, a.BytesDown = splice(client, bufioReader(buf), upstream)
	p.record(a)
}

// track closes the tunnel's connections when the proxy closes.
func (p *Proxy) track(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		if p.closed {
			c.Close()
			continue
		}
		p.conns[c] = struct{}{}
	}
}

func bufioReader(b *bufio.ReadWriter) io.Reader {
	if b == nil {
		return nil
	}
	return b.Reader
}

// splice copies both ways until either side ends; it returns bytes sent
// up (client to upstream) and down.
func splice(client net.Conn, buffered io.Reader, upstream net.Conn) (int64, int64) {
	var up, down atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		src := io.Reader(client)
		if buffered != nil {
			src = io.MultiReader(buffered, client)
		}
		n, _ := io.Copy(upstream, src)
		up.Store(n)
		if tc, ok := upstream.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
	}()
	n, _ := io.Copy(client, upstream)
	down.Store(n)
	client.Close()
	wg.Wait()
	return up.Load(), down.Load()
}

// hopHeaders are not forwarded.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// forward relays a plain HTTP request (absolute-form URL), adding the
// policy's secret headers for the host.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request) {
	a := Attempt{Time: p.now().UTC(), Method: r.Method}
	if r.URL.Scheme != "http" || r.URL.Host == "" {
		a.Host, a.Reason = r.Host, "not a proxy request (send absolute http:// URLs, or CONNECT for https)"
		p.record(a)
		http.Error(w, "corral egress: "+a.Reason, http.StatusBadRequest)
		return
	}
	addr, ok := p.admit(w, r, &a, r.URL.Host, 80)
	if !ok {
		return
	}
	a.Allowed, a.Address = true, addr.String()
	out := r.Clone(r.Context())
	out.RequestURI = ""
	for _, h := range hopHeaders {
		out.Header.Del(h)
	}
	for _, s := range p.policy.Secrets {
		if Match(s.Domain, a.Host) {
			out.Header.Set(s.Header, s.Value)
			a.Injected = append(a.Injected, s.Header)
		}
	}
	body := &countingReader{r: r.Body}
	out.Body = body
	transport := &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, "tcp", addr.String())
		},
		ResponseHeaderTimeout: 60 * time.Second,
		DisableKeepAlives:     true,
	}
	defer transport.CloseIdleConnections()
	resp, err := transport.RoundTrip(out)
	if err != nil {
		a.Reason = "upstream failed"
		a.Allowed = true
		p.record(a)
		http.Error(w, "corral egress: upstream failed", http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for _, h := range hopHeaders {
		resp.Header.Del(h)
	}
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	n, _ := io.Copy(w, resp.Body)
	a.Status, a.BytesUp, a.BytesDown = resp.StatusCode, body.n, n
	p.record(a)
}

type countingReader struct {
	r io.ReadCloser
	n int64
}

func (c *countingReader) Read(b []byte) (int, error) {
	if c.r == nil {
		return 0, io.EOF
	}
	n, err := c.r.Read(b)
	c.n += int64(n)
	return n, err
}

func (c *countingReader) Close() error {
	if c.r == nil {
		return nil
	}
	return c.r.Close()
}
