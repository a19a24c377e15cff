package e2b

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/corralhq/corral/sandbox"
)

// answerOf is what a probe saw: enough to tell two answers apart.
type answerOf struct {
	status int
	ctype  string
	body   []byte
}

// TestTokensTellNothing: a call that may not open a sandbox (an access
// token in the right shape but forged, another tenant's token or API key)
// is answered the same, to the byte, whether the sandbox exists or not:
// on every in-sandbox port and form and every REST route that takes an
// id. Each probe is answered while the sandbox runs, then after it was
// killed, and the two answers are compared.
func TestTokensTellNothing(t *testing.T) {
	u := newUnit(t, "sb.example.test")
	a := u.create(keyA, `{"templateID":"base"}`)
	b := u.create(keyB, `{"templateID":"base"}`)
	// Made through /v1: it has no access token at all.
	_, v1, err := u.sandboxes.Create(t.Context(), "alpha", sandbox.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	forged := "alpha." + strings.Repeat("0", 64)
	betaSecret := "alpha." + strings.TrimPrefix(b.EnvdAccessToken, "beta.")
	type probe struct {
		what, method, path string
		h                  func(id string) []string
	}
	header := func(port, name, token string) func(string) []string {
		return func(id string) []string {
			return []string{"E2b-Sandbox-Id", id, "E2b-Sandbox-Port", port, name, token}
		}
	}
	var probes []probe
	for _, port := range []string{"49983", "49999"} {
		for _, tok := range []struct{ what, token string }{
			{"a forged token", forged}, {"beta's token", b.EnvdAccessToken}, {"beta's secret under alpha", betaSecret},
			{"alpha's token of another sandbox", a.EnvdAccessToken},
		} {
			probes = append(probes,
				probe{tok.what + " on " + port, "GET", "/health", header(port, "X-Access-Token", tok.token)},
				probe{tok.what + " on " + port + ", traffic header", "POST", "/execute", header(port, "E2B-Traffic-Access-Token", tok.token)})
		}
		probes = append(probes, probe{"the host form on " + port, "GET", "/health", func(id string) []string {
			return []string{"Host", port + "-" + id + ".sb.example.test", "X-Access-Token", forged}
		}})
	}
	beta := func(string) []string { return []string{"X-API-Key", keyB} }
	for _, rt := range [][2]string{
		{"GET", "/sandboxes/{id}"}, {"DELETE", "/sandboxes/{id}"}, {"POST", "/sandboxes/{id}/timeout"},
		{"POST", "/sandboxes/{id}/connect"}, {"POST", "/v2/sandboxes/{id}/connect"}, {"POST", "/sandboxes/{id}/pause"},
		{"POST", "/sandboxes/{id}/resume"}, {"GET", "/sandboxes/{id}/metrics"},
	} {
		probes = append(probes, probe{"beta's API key", rt[0], rt[1], beta})
	}
	ask := func(p probe, id string) answerOf {
		t.Helper()
		body := ""
		if p.method == "POST" {
			body = `{"timeout":60}`
		}
		code, b, h := u.do(p.method, strings.ReplaceAll(p.path, "{id}", id), body, p.h(id)...)
		return answerOf{code, h.Get("Content-Type"), b}
	}
	// Two sandboxes none of the probes may open: one with an access token
	// of its own, one made through /v1 without any.
	c := u.create(keyA, `{"templateID":"base"}`)
	for _, id := range []string{c.SandboxID, v1.SandboxID} {
		before := make([]answerOf, len(probes))
		for i, p := range probes {
			before[i] = ask(p, id)
			if before[i].status < 400 || before[i].status >= 600 {
				t.Fatalf("%s %s %s for a sandbox it may not open: %d %s", p.what, p.method, p.path, before[i].status, before[i].body)
			}
		}
		u.call(keyA, "DELETE", "/sandboxes/"+id, "", http.StatusNoContent, nil)
		for i, p := range probes {
			after := ask(p, id)
			if after.status != before[i].status || after.ctype != before[i].ctype || !bytes.Equal(after.body, before[i].body) {
				t.Errorf("%s %s %s: while the sandbox runs %d %q %s, once it is gone %d %q %s", p.what, p.method, p.path,
					before[i].status, before[i].ctype, before[i].body, after.status, after.ctype, after.body)
			}
		}
	}
	// a and b are untouched: their own tokens open them.
	for _, c := range []created{a, b} {
		code, body, _ := u.do("GET", "/health", "", "E2b-Sandbox-Id", c.SandboxID, "X-Access-Token", c.EnvdAccessToken)
		if code != http.StatusOK {
			t.Errorf("%s with its token: %d %s", c.SandboxID, code, body)
		}
	}
}
