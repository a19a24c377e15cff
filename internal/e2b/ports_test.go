package e2b

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// closedPort is a port of the host's loopback (a fake sandbox's) nothing
// listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// appServer is a program's server "in" a fake sandbox (whose agent runs
// on the host: its loopback is the host's): /hello answers what it got,
// /ws upgrades to a line echo.
func appServer(t *testing.T) int {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) {
		var leaked []string
		for _, h := range []string{"X-Access-Token", "E2b-Traffic-Access-Token", "E2b-Sandbox-Id", "E2b-Sandbox-Port"} {
			if r.Header.Get(h) != "" {
				leaked = append(leaked, h)
			}
		}
		fmt.Fprintf(w, "%s %s host=%s leaked=%v", r.Method, r.URL.RequestURI(), r.Host, leaked)
	})
	mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
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

// TestTrafficPorts: a port other than envd's and the interpreter's is the
// sandbox's own server, through the header form and the host form, its
// traffic token (as E2B-Traffic-Access-Token or X-Access-Token) required
// unless the sandbox was made with network.allowPublicTraffic: a missing
// or malformed token is 403, a wrong one the answer for a sandbox gone
// (502, the same whether it exists: TestPortTokensTellNothing); Corral's
// headers do not reach the server; an upgrade is spliced; a port nothing
// listens on is 502.
func TestTrafficPorts(t *testing.T) {
	u := newUnit(t, "sb.example.test")
	a := u.create(keyA, `{"templateID":"base"}`)
	b := u.create(keyB, `{"templateID":"base"}`)
	pub := u.create(keyA, `{"templateID":"base","network":{"allowPublicTraffic":true}}`)
	port := strconv.Itoa(appServer(t))
	get := func(h ...string) (int, string) {
		t.Helper()
		code, body, _ := u.do("GET", "/hello?x=1", "", h...)
		return code, string(body)
	}
	for _, c := range []struct {
		what string
		h    []string
	}{
		{"header form, traffic token", []string{"E2b-Sandbox-Id", a.SandboxID, "E2b-Sandbox-Port", port, "E2B-Traffic-Access-Token", a.TrafficAccessToken}},
		{"header form, X-Access-Token", []string{"E2b-Sandbox-Id", a.SandboxID, "E2b-Sandbox-Port", port, "X-Access-Token", a.EnvdAccessToken}},
		{"host form", []string{"Host", port + "-" + a.SandboxID + ".sb.example.test", "E2B-Traffic-Access-Token", a.TrafficAccessToken}},
		{"public, no token", []string{"E2b-Sandbox-Id", pub.SandboxID, "E2b-Sandbox-Port", port}},
		{"public, host form, no token", []string{"Host", port + "-" + pub.SandboxID + ".sb.example.test"}},
		{"public, another tenant's token", []string{"E2b-Sandbox-Id", pub.SandboxID, "E2b-Sandbox-Port", port, "E2B-Traffic-Access-Token", a.TrafficAccessToken}},
	} {
		code, body := get(c.h...)
		if code != http.StatusOK || !strings.HasPrefix(body, "GET /hello?x=1 ") || !strings.HasSuffix(body, "leaked=[]") {
			t.Errorf("%s: %d %s", c.what, code, body)
		}
	}
	if _, body := get("Host", port+"-"+a.SandboxID+".sb.example.test", "E2B-Traffic-Access-Token", a.TrafficAccessToken); !strings.Contains(body, "host="+port+"-"+a.SandboxID+".sb.example.test") {
		t.Errorf("the host form's Host did not reach the server: %s", body)
	}
	for _, c := range []struct {
		what string
		h    []string
		want int
	}{
		{"no token", []string{"E2b-Sandbox-Id", a.SandboxID, "E2b-Sandbox-Port", port}, http.StatusForbidden},
		{"host form, no token", []string{"Host", port + "-" + a.SandboxID + ".sb.example.test"}, http.StatusForbidden},
		{"a wrong token", []string{"E2b-Sandbox-Id", a.SandboxID, "E2b-Sandbox-Port", port, "E2B-Traffic-Access-Token", "alpha." + strings.Repeat("0", 64)}, http.StatusBadGateway},
		{"a token of no tenant's shape", []string{"E2b-Sandbox-Id", a.SandboxID, "E2b-Sandbox-Port", port, "E2B-Traffic-Access-Token", "nodot"}, http.StatusForbidden},
		{"alpha's token for alpha's other sandbox", []string{"E2b-Sandbox-Id", pub.SandboxID, "E2b-Sandbox-Port", port, "E2B-Traffic-Access-Token", "alpha." + strings.Repeat("0", 64)}, http.StatusOK},
		{"beta's token for alpha's sandbox", []string{"E2b-Sandbox-Id", a.SandboxID, "E2b-Sandbox-Port", port, "E2B-Traffic-Access-Token", b.TrafficAccessToken}, http.StatusBadGateway},
		{"a path with ..", []string{"E2b-Sandbox-Id", pub.SandboxID, "E2b-Sandbox-Port", port, "X-Path", ".."}, 0},
		{"no such sandbox", []string{"E2b-Sandbox-Id", "i0000000000000000000", "E2b-Sandbox-Port", port, "E2B-Traffic-Access-Token", a.TrafficAccessToken}, http.StatusBadGateway},
	} {
		if c.want == 0 {
			code, body, _ := u.do("GET", "/a/%2E%2E/hello", "", c.h...)
			e2bError(t, c.what, code, body, http.StatusBadRequest)
			continue
		}
		code, body, _ := u.do("GET", "/hello", "", c.h...)
		if c.want == http.StatusOK {
			if code != http.StatusOK {
				t.Errorf("%s: %d %s", c.what, code, body)
			}
			continue
		}
		e2bError(t, c.what, code, body, c.want)
	}
	code, body, _ := u.do("GET", "/", "", "E2b-Sandbox-Id", a.SandboxID, "E2b-Sandbox-Port", strconv.Itoa(closedPort(t)),
		"E2B-Traffic-Access-Token", a.TrafficAccessToken)
	if msg := e2bError(t, "a port nothing listens on", code, body, http.StatusBadGateway); !strings.Contains(msg, "nothing listens on port") {
		t.Errorf("a port nothing listens on: %q", msg)
	}

	// An upgrade through the header form, spliced both ways.
	c, err := net.Dial("tcp", strings.TrimPrefix(u.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(c, "GET /ws HTTP/1.1\r\nHost: x\r\nE2b-Sandbox-Id: %s\r\nE2b-Sandbox-Port: %s\r\nE2B-Traffic-Access-Token: %s\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n",
		a.SandboxID, port, a.TrafficAccessToken)
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	if err != nil || res.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", res, err)
	}
	io.WriteString(c, "ping\n")
	if line, err := br.ReadString('\n'); err != nil || line != "echo ping\n" {
		t.Fatalf("upgraded: %q, %v", line, err)
	}
}

// TestPortTokensTellNothing: traffic to a port with a token that does not
// open the sandbox gets the same answer, to the byte, whether the sandbox
// exists or not; so does traffic without a token.
func TestPortTokensTellNothing(t *testing.T) {
	u := newUnit(t, "")
	a := u.create(keyA, `{"templateID":"base"}`)
	wrong := "alpha." + strings.Repeat("0", 64)
	for _, token := range []string{wrong, ""} {
		var answers []string
		for _, id := range []string{a.SandboxID, "i0000000000000000000"} {
			h := []string{"E2b-Sandbox-Id", id, "E2b-Sandbox-Port", "8000"}
			if token != "" {
				h = append(h, "E2B-Traffic-Access-Token", token)
			}
			code, body, _ := u.do("GET", "/", "", h...)
			answers = append(answers, fmt.Sprintf("%d %s", code, strings.ReplaceAll(string(body), id, "ID")))
		}
		if answers[0] != answers[1] {
			t.Errorf("token %q: %q for the sandbox, %q for no sandbox", token, answers[0], answers[1])
		}
	}
}
