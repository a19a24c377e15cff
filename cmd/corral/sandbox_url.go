package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"time"
)

// cmdSandboxURL prints the URLs of a port of a live sandbox: /v1's route,
// and E2B's host form when the server has a domain for it.
func cmdSandboxURL(args []string) int {
	fs, cf := sandboxFlags("url", "[flags] ID PORT",
		"Prints the URL through which a server listening on PORT in the sandbox answers:\n"+
			"/v1/sandboxes/ID/ports/PORT/ (send the API key as Authorization: Bearer), and,\n"+
			"when the server has an [e2b] domain, the host form https://PORT-ID.DOMAIN/ (send the\n"+
			"sandbox's traffic token as E2B-Traffic-Access-Token, unless its ports are public).")
	if code, ok := parseSandbox(fs, args); !ok {
		return code
	}
	if fs.NArg() != 2 {
		fs.Usage()
		return 4
	}
	id := fs.Arg(0)
	port, err := strconv.Atoi(fs.Arg(1))
	if err != nil || port < 1 || port > 65535 {
		fmt.Fprintf(os.Stderr, "corral sandbox url: %q: a port is a number from 1 to 65535\n", fs.Arg(1))
		return 4
	}
	ctx, stop := interruptible()
	defer stop()
	sb := cf.client().Sandbox(id)
	if _, err := sb.Info(ctx); err != nil {
		return callFailed("sandbox url", err)
	}
	fmt.Println(sb.PortURL(port))
	if host := hostForm(ctx, cf, id, port); host != "" {
		fmt.Println(host)
	}
	return 0
}

// hostForm is E2B's host form of the port ({port}-{id}.{domain}) on the
// server's listener, or "" when the server has no domain (or no E2B API).
// The domain is what E2B's API answers for the sandbox.
func hostForm(ctx context.Context, cf *clientFlags, id string, port int) string {
	ep, err := url.Parse(cf.endpoint)
	if err != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ep.JoinPath("sandboxes", id).String(), nil)
	if err != nil {
		return ""
	}
	req.Header.Set("Authorization", "Bearer "+cf.apiKey)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return ""
	}
	defer res.Body.Close()
	var d struct {
		Domain *string `json:"domain"`
	}
	if res.StatusCode != http.StatusOK || json.NewDecoder(res.Body).Decode(&d) != nil || d.Domain == nil || *d.Domain == "" {
		return ""
	}
	host := fmt.Sprintf("%d-%s.%s", port, id, *d.Domain)
	if p := ep.Port(); p != "" {
		host = net.JoinHostPort(host, p)
	}
	return ep.Scheme + "://" + host + "/"
}
