// Package netpolicy decides where Corral may connect on behalf of a request:
// callbacks, input downloads and (later) the sandbox egress proxy. Its
// guard checks the address actually dialled, after DNS resolution, so a
// name that resolves to a private address (or is rebound to one) is still
// refused.
package netpolicy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"
)

// ErrForbidden is a connection the policy refuses.
var ErrForbidden = errors.New("destination not allowed")

// Non-public ranges beyond what netip's predicates know.
var special = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network"
	netip.MustParsePrefix("100.64.0.0/10"),   // carrier-grade NAT
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
	netip.MustParsePrefix("192.0.2.0/24"),    // documentation
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
	netip.MustParsePrefix("198.51.100.0/24"), // documentation
	netip.MustParsePrefix("203.0.113.0/24"),  // documentation
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, broadcast
	netip.MustParsePrefix("64:ff9b::/96"),    // NAT64 (maps to IPv4, checked unmapped too)
	netip.MustParsePrefix("2001:db8::/32"),   // documentation
}

// Public reports whether addr is a public unicast address: not loopback,
// private, link-local (169.254.0.0/16 holds cloud metadata services),
// multicast, unspecified or otherwise reserved.
func Public(addr netip.Addr) bool {
	addr = addr.Unmap()
	if !addr.IsValid() || addr.IsLoopback() || addr.IsPrivate() || addr.IsLinkLocalUnicast() ||
		addr.IsLinkLocalMulticast() || addr.IsInterfaceLocalMulticast() || addr.IsMulticast() || addr.IsUnspecified() {
		return false
	}
	for _, p := range special {
		if p.Contains(addr) {
			return false
		}
	}
	return true
}

// Guard refuses connections to non-public addresses unless AllowPrivate.
type Guard struct {
	AllowPrivate bool
}

// check is a net.Dialer Control function: it sees the resolved address
// right before connect.
func (g Guard) check(network, address string, _ syscall.RawConn) error {
	if g.AllowPrivate {
		return nil
	}
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: %s", ErrForbidden, address)
	}
	if !Public(ap.Addr()) {
		return fmt.Errorf("%w: %s is not a public address", ErrForbidden, ap.Addr())
	}
	return nil
}

// Dialer returns a dialer that enforces the guard.
func (g Guard) Dialer(timeout time.Duration) *net.Dialer {
	return &net.Dialer{Timeout: timeout, Control: g.check}
}

// MaxRedirects bounds redirects the guarded client follows.
const MaxRedirects = 5

// Client returns an HTTP client whose every connection, redirects included,
// goes through the guard, with no proxy from the environment.
func (g Guard) Client(timeout time.Duration) *http.Client {
	d := g.Dialer(10 * time.Second)
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			Proxy: nil,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				return d.DialContext(ctx, network, addr)
			},
			TLSHandshakeTimeout:   10 * time.Second,
			ResponseHeaderTimeout: timeout,
			MaxIdleConnsPerHost:   4,
			IdleConnTimeout:       30 * time.Second,
		},
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= MaxRedirects {
				return fmt.Errorf("stopped after %d redirects", MaxRedirects)
			}
			if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
				return fmt.Errorf("%w: redirect to %s", ErrForbidden, req.URL.Scheme)
			}
			return nil
		},
	}
}
