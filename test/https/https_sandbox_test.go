// Package https tests corral serve over TLS as docs/production.md sets it
// up, with a local CA of the test's own: clients that trust the CA reach
// it and others are refused, the commands docs/production.md gives for a
// local CA make a certificate it serves, the E2B host form ({port}-{id}.{domain}) is
// served under a wildcard certificate, and certificate files replaced
// while it serves are picked up (a broken pair is not).
package https

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/internal/tlscert"
	"github.com/corralhq/corral/internal/tlscert/certtest"
	"github.com/corralhq/corral/test/testserver"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const domain = "sandbox.test"

// served is the leaf a new handshake with addr shows.
func served(t *testing.T, addr string, roots *x509.CertPool) (*x509.Certificate, error) {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{RootCAs: roots})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0], nil
}

// TestServeHTTPS: a server with [tls] answers a client trusting its CA;
// one that does not is refused at the handshake; the E2B host form
// reaches a sandbox's envd under the wildcard certificate (what older
// Python SDKs call); replaced certificate files are served from the next
// handshake after a second, and a broken pair keeps the one served,
// logged once.
func TestServeHTTPS(t *testing.T) {
	ca := certtest.NewCA(t)
	s := testserver.Start(t, testserver.Options{NoPool: true, TLS: testserver.LocalTLS(t, ca, domain),
		Config: "\n[e2b]\ndomain = \"" + domain + "\"\n"})
	addr := strings.TrimPrefix(s.URL, "https://")

	if status, body := s.Call("", "GET", "/readyz", nil, nil); status != http.StatusOK {
		t.Fatalf("readyz over https: %d %s", status, body)
	}
	// HTTP/2 for clients that offer it, HTTP/1.1 for the others (the
	// E2B SDKs' fetch, below).
	roots, err := tlscert.Pool(s.TLS.CA)
	if err != nil {
		t.Fatal(err)
	}
	for _, h2 := range []bool{true, false} {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: h2}
		resp, err := (&http.Client{Transport: tr}).Get(s.URL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if want := map[bool]int{true: 2, false: 1}[h2]; resp.ProtoMajor != want {
			t.Errorf("offering h2 %v: answered over %s", h2, resp.Proto)
		}
	}
	var unknown x509.UnknownAuthorityError
	if _, err := http.Get(s.URL + "/readyz"); !errors.As(err, &unknown) {
		t.Errorf("a client that does not trust the CA: %v, want an unknown authority", err)
	}
	if resp, err := http.Get("http://" + addr + "/readyz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("plain http to the https listener: %d, want 400", resp.StatusCode)
		}
	}

	// The host form over TLS: an E2B sandbox's envd at
	// https://49983-<id>.sandbox.test, resolved to the server by the
	// client's dialer, verified against the wildcard.
	var sb struct {
		SandboxID       string `json:"sandboxID"`
		EnvdAccessToken string `json:"envdAccessToken"`
		Domain          string `json:"domain"`
	}
	e2b := func(method, url, body string, h ...string) (int, []byte) {
		t.Helper()
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, err := http.NewRequestWithContext(t.Context(), method, url, rd)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(h); i += 2 {
			req.Header.Set(h[i], h[i+1])
		}
		tr := s.HTTP.Transport.(*http.Transport).Clone()
		tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, url, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	key := []string{"X-API-Key", testserver.AlphaE2BKey}
	status, body := e2b("POST", s.URL+"/sandboxes", `{"templateID":"base","timeout":120}`, key...)
	if status != http.StatusCreated || json.Unmarshal(body, &sb) != nil || sb.SandboxID == "" {
		t.Fatalf("create an E2B sandbox over https: %d %s", status, body)
	}
	defer e2b("DELETE", s.URL+"/sandboxes/"+sb.SandboxID, "", key...)
	if sb.Domain != domain {
		t.Errorf("the sandbox's domain is %q, want %q", sb.Domain, domain)
	}
	host := "https://49983-" + sb.SandboxID + "." + domain
	if status, body := e2b("GET", host+"/health", "", "X-Access-Token", sb.EnvdAccessToken); status/100 != 2 {
		t.Errorf("GET %s/health: %d %s", host, status, body)
	}
	if status, _ := e2b("GET", host+"/health", ""); status != http.StatusUnauthorized {
		t.Errorf("GET %s/health without the token: %d, want 401", host, status)
	}
	// The code interpreter's port, as e2b_code_interpreter before 2.9
	// calls it.
	interp := "https://49999-" + sb.SandboxID + "." + domain
	if status, body := e2b("POST", interp+"/execute", `{"code":"print(6*7)"}`, "X-Access-Token", sb.EnvdAccessToken); status != http.StatusOK || !strings.Contains(string(body), "42") {
		t.Errorf("POST %s/execute: %d %s", interp, status, body)
	}

	// Reload: a new pair is served once the server looks again (a
	// second at most), by new handshakes.
	first, err := served(t, addr, ca.Pool())
	if err != nil {
		t.Fatal(err)
	}
	second := ca.Issue(t, domain, time.Time{})
	second.Write(t, s.TLS.Cert, s.TLS.Key)
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := served(t, addr, ca.Pool())
		if err != nil {
			t.Fatalf("handshake after the files changed: %v", err)
		}
		if got.Equal(second.Leaf) {
			break
		}
		if !got.Equal(first) {
			t.Fatalf("served %s, neither the first nor the new pair", got.SerialNumber)
		}
		if time.Now().After(deadline) {
			t.Fatal("the new pair was not served within 10 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	// A broken pair (a certificate with another's key): the second pair
	// stays, for handshakes over several seconds, logged once.
	third, other := ca.Issue(t, domain, time.Time{}), ca.Issue(t, domain, time.Time{})
	certtest.WriteFile(t, s.TLS.Cert, third.Cert)
	certtest.WriteFile(t, s.TLS.Key, other.Key)
	for end := time.Now().Add(2500 * time.Millisecond); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		got, err := served(t, addr, ca.Pool())
		if err != nil || !got.Equal(second.Leaf) {
			t.Fatalf("with a broken pair on disk: %v, %v; want the second pair still", got, err)
		}
	}
	if status, body := s.Call("", "GET", "/readyz", nil, nil); status != http.StatusOK {
		t.Errorf("readyz with a broken pair on disk: %d %s", status, body)
	}
	if n := strings.Count(s.Log(), "new TLS certificate not loaded"); n != 1 {
		t.Errorf("the broken pair was logged %d times, want once", n)
	}
}

// TestDocumentedCA: the commands docs/production.md gives for a local CA
// make files corral serve serves https with, for the names it lists.
func TestDocumentedCA(t *testing.T) {
	_, err := exec.LookPath("openssl")
	testenv.Need(t, err == nil, "openssl")
	doc, err := os.ReadFile(filepath.Join(testenv.ModuleRoot(t), "docs", "production.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(doc), "\n### TLS\n")
	_, block, ok := strings.Cut(section, "```sh\n")
	block, _, _ = strings.Cut(block, "```")
	if !ok || !strings.Contains(block, "openssl") {
		t.Fatal("docs/production.md's TLS section has no sh block with the openssl commands")
	}
	dir := t.TempDir()
	cmd := exec.CommandContext(t.Context(), "bash", "-euo", "pipefail", "-c", block)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the documented commands: %v\n%s", err, out)
	}
	files := &testserver.TLS{Cert: filepath.Join(dir, "tls.crt"), Key: filepath.Join(dir, "tls.key"), CA: filepath.Join(dir, "ca.pem")}
	s := testserver.Start(t, testserver.Options{NoPool: true, TLS: files, Config: "\n[e2b]\ndomain = \"sb.example.com\"\n"})
	if status, body := s.Call("", "GET", "/readyz", nil, nil); status != http.StatusOK {
		t.Fatalf("readyz over https with the documented certificate: %d %s", status, body)
	}
	roots, err := tlscert.Pool(files.CA)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := served(t, strings.TrimPrefix(s.URL, "https://"), roots)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"corral.example.com", "49999-i0123456789abcdef012.sb.example.com", "node-a.internal", "127.0.0.1"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: name}); err != nil {
			t.Errorf("the documented certificate for %s: %v", name, err)
		}
	}
}
