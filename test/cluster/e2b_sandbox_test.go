package cluster

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/test/testserver"
)

// e2bCall makes an E2B call to s with headers h (pairs) and returns the
// status and body.
func e2bCall(t *testing.T, s *testserver.Server, method, path, body string, h ...string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, s.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(h); i += 2 {
		req.Header.Set(h[i], h[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// TestE2BAcrossNodes: an E2B sandbox made on node A is reached through B
// and C as on A: get, timeout and connect through B, listed by metadata on
// every node, in-sandbox traffic with its token forwarded to A (a wrong
// token refused there; a server the sandbox runs answering through B, and
// through C's /v1 port route), another tenant refused everywhere, killed
// through C and gone on all.
func TestE2BAcrossNodes(t *testing.T) {
	nodes := startNodes(t, nil, nil, nil)
	a, b, c := nodes[0], nodes[1], nodes[2]
	alpha := []string{"X-API-Key", testserver.AlphaKey}
	beta := []string{"X-API-Key", testserver.BetaKey}
	code, body := e2bCall(t, a, "POST", "/v2/sandboxes", `{"templateID":"base","timeout":600,"metadata":{"run":"e2b-across"}}`, alpha...)
	var sb struct {
		SandboxID       string `json:"sandboxID"`
		EnvdAccessToken string `json:"envdAccessToken"`
	}
	if code != http.StatusCreated || json.Unmarshal(body, &sb) != nil || sb.SandboxID == "" {
		t.Fatalf("create on A: %d %s", code, body)
	}
	defer e2bCall(t, a, "DELETE", "/sandboxes/"+sb.SandboxID, "", alpha...)

	if code, body := e2bCall(t, b, "GET", "/sandboxes/"+sb.SandboxID, "", alpha...); code != http.StatusOK {
		t.Errorf("get through B: %d %s", code, body)
	}
	if code, body := e2bCall(t, b, "POST", "/sandboxes/"+sb.SandboxID+"/timeout", `{"timeout":900}`, alpha...); code != http.StatusNoContent {
		t.Errorf("timeout through B: %d %s", code, body)
	}
	var cn struct {
		EnvdAccessToken string `json:"envdAccessToken"`
	}
	code, body = e2bCall(t, b, "POST", "/v2/sandboxes/"+sb.SandboxID+"/connect", `{}`, alpha...)
	if code != http.StatusOK || json.Unmarshal(body, &cn) != nil || cn.EnvdAccessToken != sb.EnvdAccessToken {
		t.Errorf("connect through B: %d %s, want the token made on A", code, body)
	}
	for _, n := range nodes {
		var l []struct {
			SandboxID string    `json:"sandboxID"`
			EndAt     time.Time `json:"endAt"`
		}
		code, body := e2bCall(t, n, "GET", "/v2/sandboxes?metadata="+url.QueryEscape("run=e2b-across"), "", alpha...)
		if code != http.StatusOK || json.Unmarshal(body, &l) != nil || len(l) != 1 || l[0].SandboxID != sb.SandboxID ||
			time.Until(l[0].EndAt) < 880*time.Second {
			t.Errorf("list by metadata on %s: %d %s", n.URL, code, body)
		}
		if code, body := e2bCall(t, n, "GET", "/sandboxes/"+sb.SandboxID, "", beta...); code != http.StatusNotFound {
			t.Errorf("beta's get on %s: %d %s", n.URL, code, body)
		}
	}

	// Through B to A: with its token the call passes the check on A and
	// reaches the sandbox's own server on the port (started through B);
	// a port nothing listens on is A's 502 port_closed; B alone would not
	// know the sandbox, and A answers a wrong token as a sandbox gone
	// (502), the same answer as once the sandbox is killed.
	if code, body := e2bCall(t, b, "POST", "/v1/sandboxes/"+sb.SandboxID+"/processes",
		`{"cmd": ["python3", "-m", "http.server", "8080", "--bind", "127.0.0.1", "--directory", "/tmp"]}`,
		"Authorization", "Bearer "+testserver.AlphaKey); code != http.StatusCreated {
		t.Fatalf("start a server through B: %d %s", code, body)
	}
	traffic := func(token string) []string {
		return []string{"E2b-Sandbox-Id", sb.SandboxID, "E2b-Sandbox-Port", "8080", "X-Access-Token", token}
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		code, body := e2bCall(t, b, "GET", "/", "", traffic(sb.EnvdAccessToken)...)
		if code == http.StatusOK && bytes.Contains(body, []byte("Directory listing")) {
			break
		}
		if !bytes.Contains(body, []byte("nothing listens on port 8080")) || time.Now().After(deadline) {
			t.Fatalf("traffic to the sandbox's server through B: %d %s", code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code, body := e2bCall(t, c, "GET", "/v1/sandboxes/"+sb.SandboxID+"/ports/8080/", "", "Authorization", "Bearer "+testserver.AlphaKey); code != http.StatusOK || !bytes.Contains(body, []byte("Directory listing")) {
		t.Errorf("/v1's port route through C: %d %s", code, body)
	}
	if code, body := e2bCall(t, b, "GET", "/", "", "E2b-Sandbox-Id", sb.SandboxID, "E2b-Sandbox-Port", "8081",
		"X-Access-Token", sb.EnvdAccessToken); code != http.StatusBadGateway || !bytes.Contains(body, []byte("nothing listens on port 8081")) {
		t.Errorf("a port nothing listens on, through B: %d %s", code, body)
	}
	wrongCode, wrongBody := e2bCall(t, b, "GET", "/", "", traffic("alpha."+strings.Repeat("0", 64))...)
	if wrongCode != http.StatusBadGateway {
		t.Errorf("traffic through B with a wrong token: %d %s", wrongCode, wrongBody)
	}

	if code, body := e2bCall(t, c, "DELETE", "/sandboxes/"+sb.SandboxID, "", alpha...); code != http.StatusNoContent {
		t.Fatalf("kill through C: %d %s", code, body)
	}
	for _, n := range nodes {
		if code, body := e2bCall(t, n, "GET", "/sandboxes/"+sb.SandboxID, "", alpha...); code != http.StatusNotFound {
			t.Errorf("after the kill, get on %s: %d %s", n.URL, code, body)
		}
	}
	if code, body := e2bCall(t, b, "GET", "/", "", traffic("alpha."+strings.Repeat("0", 64))...); code != wrongCode || !bytes.Equal(body, wrongBody) {
		t.Errorf("a wrong token through B: %d %s while the sandbox ran, %d %s once killed", wrongCode, wrongBody, code, body)
	}
}
