// Package e2bapi tests E2B's control-plane routes and the dispatch of
// in-sandbox traffic through a real corral serve on runc: an E2B sandbox is
// a live sandbox of Corral (a /v1 process runs in it), listed by metadata
// and paged, its timeout moved, connected to again, killed; another
// tenant's is 404; a missing or wrong access token is refused.
package e2bapi

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/test/testserver"
)

func TestMain(m *testing.M) { testenv.Main(m) }

type client struct {
	t   *testing.T
	url string
}

// do makes a call with headers h (pairs) and returns the status, body and
// headers of its answer.
func (c client) do(method, path, body string, h ...string) (int, []byte, http.Header) {
	c.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(c.t.Context(), method, c.url+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(h); i += 2 {
		req.Header.Set(h[i], h[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return res.StatusCode, b, res.Header
}

// want checks a call's status and decodes its answer into out.
func (c client) want(status int, out any, method, path, body string, h ...string) http.Header {
	c.t.Helper()
	code, b, hdr := c.do(method, path, body, h...)
	if code != status {
		c.t.Fatalf("%s %s: %d %s, want %d", method, path, code, b, status)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			c.t.Fatalf("%s %s: %s: %v", method, path, b, err)
		}
	}
	if status >= 400 {
		var e struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		}
		if json.Unmarshal(b, &e) != nil || e.Code != status || e.Message == "" {
			c.t.Errorf("%s %s: %s is not E2B's error body", method, path, b)
		}
	}
	return hdr
}

type sandboxAnswer struct {
	SandboxID       string            `json:"sandboxID"`
	TemplateID      string            `json:"templateID"`
	EnvdVersion     string            `json:"envdVersion"`
	EnvdAccessToken string            `json:"envdAccessToken"`
	State           string            `json:"state"`
	Metadata        map[string]string `json:"metadata"`
	EndAt           time.Time         `json:"endAt"`
}

func TestE2BAPI(t *testing.T) {
	s := testserver.Start(t, testserver.Options{NoPool: true})
	c := client{t: t, url: s.URL}
	alpha := []string{"X-API-Key", testserver.AlphaKey}
	beta := []string{"X-API-Key", testserver.BetaKey}

	start := time.Now()
	var a, b sandboxAnswer
	c.want(http.StatusCreated, &a, "POST", "/v2/sandboxes", `{"templateID":"base","timeout":120,"metadata":{"suite":"e2bapi","n":"1"}}`, alpha...)
	created := time.Since(start)
	c.want(http.StatusCreated, &b, "POST", "/sandboxes", `{"templateID":"base","metadata":{"suite":"e2bapi","n":"2"}}`, alpha...)
	t.Logf("POST /v2/sandboxes on runc: %s", created)
	if a.SandboxID == "" || !strings.HasPrefix(a.EnvdAccessToken, "alpha.") || a.EnvdVersion == "" {
		t.Fatalf("create answered %+v", a)
	}
	defer c.do("DELETE", "/sandboxes/"+a.SandboxID, "", alpha...)
	defer c.do("DELETE", "/sandboxes/"+b.SandboxID, "", alpha...)
	c.want(http.StatusNotFound, nil, "POST", "/v2/sandboxes", `{"templateID":"no-such-template"}`, alpha...)

	// The same sandbox through /v1: a process runs in it.
	var p struct {
		PID int `json:"pid"`
	}
	v1 := []string{"Authorization", "Bearer " + testserver.AlphaKey}
	c.want(http.StatusCreated, &p, "POST", "/v1/sandboxes/"+a.SandboxID+"/processes", `{"shell":"echo hi > /workspace/mark"}`, v1...)
	var proc struct {
		Exit *struct {
			ExitCode int `json:"exit_code"`
		} `json:"exit"`
	}
	c.want(http.StatusOK, &proc, "GET", "/v1/sandboxes/"+a.SandboxID+"/processes/"+strconv.Itoa(p.PID)+"?wait=true", "", v1...)
	if proc.Exit == nil || proc.Exit.ExitCode != 0 {
		t.Errorf("a /v1 process in the E2B sandbox: %+v", proc)
	}

	var got sandboxAnswer
	c.want(http.StatusOK, &got, "GET", "/sandboxes/"+a.SandboxID, "", alpha...)
	if got.SandboxID != a.SandboxID || got.State != "running" || got.Metadata["n"] != "1" {
		t.Errorf("get answered %+v", got)
	}

	// v2 list by metadata, paged one by one.
	md := "metadata=" + url.QueryEscape("suite=e2bapi")
	seen := map[string]bool{}
	token := ""
	for page := 0; page < 4; page++ {
		q := "/v2/sandboxes?limit=1&" + md
		if token != "" {
			q += "&nextToken=" + url.QueryEscape(token)
		}
		var l []sandboxAnswer
		h := c.want(http.StatusOK, &l, "GET", q, "", alpha...)
		for _, x := range l {
			seen[x.SandboxID] = true
		}
		if token = h.Get("X-Next-Token"); token == "" {
			break
		}
	}
	if len(seen) != 2 || !seen[a.SandboxID] || !seen[b.SandboxID] {
		t.Errorf("paged list by metadata saw %v, want %s and %s", seen, a.SandboxID, b.SandboxID)
	}
	var one []sandboxAnswer
	c.want(http.StatusOK, &one, "GET", "/v2/sandboxes?metadata="+url.QueryEscape("suite=e2bapi&n=2"), "", alpha...)
	if len(one) != 1 || one[0].SandboxID != b.SandboxID {
		t.Errorf("n=2 lists %+v", one)
	}

	// Timeout and connect.
	c.want(http.StatusNoContent, nil, "POST", "/sandboxes/"+a.SandboxID+"/timeout", `{"timeout":900}`, alpha...)
	c.want(http.StatusOK, &got, "GET", "/sandboxes/"+a.SandboxID, "", alpha...)
	if left := time.Until(got.EndAt); left < 880*time.Second {
		t.Errorf("after a timeout of 900 s the sandbox ends in %s", left)
	}
	var cn sandboxAnswer
	c.want(http.StatusOK, &cn, "POST", "/v2/sandboxes/"+a.SandboxID+"/connect", `{"timeout":60}`, alpha...)
	if cn.EnvdAccessToken != a.EnvdAccessToken {
		t.Errorf("connect gave token %q, want the sandbox's", cn.EnvdAccessToken)
	}

	// Another tenant: 404 on every route, and nothing listed.
	for _, call := range [][3]string{{"GET", "", ""}, {"POST", "/timeout", `{"timeout":5}`}, {"POST", "/connect", `{}`}, {"DELETE", "", ""}} {
		c.want(http.StatusNotFound, nil, call[0], "/sandboxes/"+a.SandboxID+call[1], call[2], beta...)
	}
	var none []sandboxAnswer
	c.want(http.StatusOK, &none, "GET", "/v2/sandboxes?"+md, "", beta...)
	if len(none) != 0 {
		t.Errorf("beta lists %+v", none)
	}

	// In-sandbox traffic: the token is checked before any service.
	traffic := func(token string) []string {
		h := []string{"E2b-Sandbox-Id", a.SandboxID, "E2b-Sandbox-Port", "49983"}
		if token != "" {
			h = append(h, "X-Access-Token", token)
		}
		return h
	}
	c.want(http.StatusUnauthorized, nil, "GET", "/health", "", traffic("")...)
	// A token that does not open the sandbox finds it gone, as one for a
	// sandbox that is not there: the answer tells nobody which ids exist.
	c.want(http.StatusBadGateway, nil, "GET", "/health", "", traffic("alpha."+strings.Repeat("0", 64))...)
	// Beta's prefix: beta has no such sandbox, so for that token it is gone.
	c.want(http.StatusBadGateway, nil, "GET", "/health", "", traffic("beta."+strings.TrimPrefix(a.EnvdAccessToken, "alpha."))...)

	// Kill: 204, then 404.
	c.want(http.StatusNoContent, nil, "DELETE", "/sandboxes/"+a.SandboxID, "", alpha...)
	c.want(http.StatusNotFound, nil, "DELETE", "/sandboxes/"+a.SandboxID, "", alpha...)
	c.want(http.StatusNotFound, nil, "GET", "/sandboxes/"+a.SandboxID, "", alpha...)
	c.want(http.StatusBadGateway, nil, "GET", "/health", "", traffic(a.EnvdAccessToken)...)
}
