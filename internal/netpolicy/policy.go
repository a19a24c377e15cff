package netpolicy

import (
	"fmt"
	"net/netip"
	"strings"
)

// Secret is a header the egress proxy adds to requests for matching
// hosts, so that credentials reach the service without ever entering the
// sandbox.
type Secret struct {
	// Domain is a pattern (see Match).
	Domain string `toml:"domain"`
	Header string `toml:"header"`
	Value  string `toml:"value"`
}

// Policy is the server's egress policy: what any request may reach at
// most.
type Policy struct {
	// Allow lists domain patterns requests may ask for; empty disables
	// network access altogether.
	Allow []string `toml:"allow"`
	// Ports are the destination ports allowed (default 80 and 443).
	Ports []int `toml:"ports"`
	// AllowPrivate lets the proxy reach private, loopback and link-local
	// addresses.
	AllowPrivate bool `toml:"allow_private"`
	// Resolve pins hosts to addresses (trusted: exempt from the private
	// check), e.g. for an internal service or a test server.
	Resolve map[string]string `toml:"resolve"`
	// Secrets are injected per domain.
	Secrets []Secret `toml:"secrets"`
}

// Enabled reports whether any network access can be granted.
func (p Policy) Enabled() bool { return len(p.Allow) > 0 }

// CheckPattern validates a domain pattern: "example.com" (that host),
// "*.example.com" (any host below it, not example.com itself) or "*" (any
// host; only in a server policy).
func CheckPattern(p string) error {
	if p == "*" {
		return nil
	}
	host := strings.TrimPrefix(p, "*.")
	if host == "" || len(host) > 253 || strings.ContainsAny(host, "*/:@ ") || strings.HasPrefix(host, ".") || strings.HasSuffix(host, ".") {
		return fmt.Errorf("%q is not a domain pattern (example.com or *.example.com)", p)
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return fmt.Errorf("%q is an address; allow names, not addresses", p)
	}
	return nil
}

// Match reports whether host matches pattern. Names compare without case
// and without a trailing dot.
func Match(pattern, host string) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	pattern = strings.ToLower(pattern)
	switch {
	case pattern == "*":
		return true
	case strings.HasPrefix(pattern, "*."):
		return strings.HasSuffix(host, pattern[1:])
	default:
		return host == pattern
	}
}

// covers reports whether every host that req matches, server matches.
func covers(server, req string) bool {
	server, req = strings.ToLower(server), strings.ToLower(req)
	switch {
	case server == "*":
		return true
	case req == "*":
		return false
	case strings.HasPrefix(req, "*."):
		return strings.HasPrefix(server, "*.") && (req == server || strings.HasSuffix(req[1:], server[1:]))
	default:
		return Match(server, req)
	}
}

// Narrow returns the request's allowlist if the policy covers every
// pattern in it: a request can narrow the server's policy, never widen it.
// The error names the first pattern refused, by index.
func (p Policy) Narrow(request []string) ([]string, int, error) {
	if !p.Enabled() {
		return nil, 0, fmt.Errorf("network access is not enabled on this server")
	}
	if len(request) == 0 {
		return nil, 0, fmt.Errorf("list the domains the program may reach")
	}
	if len(request) > 100 {
		return nil, 100, fmt.Errorf("at most 100 patterns")
	}
	for i, r := range request {
		if err := CheckPattern(r); err != nil {
			return nil, i, err
		}
		ok := false
		for _, s := range p.Allow {
			if covers(s, r) {
				ok = true
				break
			}
		}
		if !ok {
			return nil, i, fmt.Errorf("%q is outside what this server allows", r)
		}
	}
	return request, 0, nil
}

func (p Policy) port(n int) bool {
	ports := p.Ports
	if len(ports) == 0 {
		ports = []int{80, 443}
	}
	for _, q := range ports {
		if q == n {
			return true
		}
	}
	return false
}
