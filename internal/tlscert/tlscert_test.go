package tlscert

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/tlscert/certtest"
)

// server serves TLS handshakes with r's pair on loopback until the test
// ends.
func server(t *testing.T, r *Reloader) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", r.ServerConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.(*tls.Conn).Handshake()
			}()
		}
	}()
	return ln.Addr().String()
}

// served is the leaf a new handshake with addr is shown, trusting roots.
func served(t *testing.T, addr string, roots *x509.CertPool) (*x509.Certificate, error) {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{RootCAs: roots})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0], nil
}

// syncBuffer is a log a test reads while handshakes write it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestReload: a client trusting the CA gets the pair, one that does not
// is refused; replaced files are served from the first handshake after
// the next check (not before); a broken pair keeps the old one, logged
// once however many handshakes see it; a good pair after it is served.
func TestReload(t *testing.T) {
	ca := certtest.NewCA(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	first := ca.Issue(t, "sandbox.test", time.Time{})
	first.Write(t, certFile, keyFile)
	var logs syncBuffer
	r, err := NewReloader(certFile, keyFile, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	now := time.Now()
	r.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	tick := func() { mu.Lock(); now = now.Add(CheckInterval); mu.Unlock() }
	addr := server(t, r)
	leaf := func() *x509.Certificate {
		t.Helper()
		c, err := served(t, addr, ca.Pool())
		if err != nil {
			t.Fatalf("handshake trusting the CA: %v", err)
		}
		return c
	}

	if got := leaf(); !got.Equal(first.Leaf) {
		t.Fatalf("served %s, want the first pair", got.SerialNumber)
	}
	var unknown x509.UnknownAuthorityError
	if _, err := served(t, addr, x509.NewCertPool()); !errors.As(err, &unknown) {
		t.Errorf("a client not trusting the CA: %v, want an unknown authority", err)
	}

	second := ca.Issue(t, "sandbox.test", time.Time{})
	second.Write(t, certFile, keyFile)
	if got := leaf(); !got.Equal(first.Leaf) {
		t.Errorf("within the check interval, served %s, want the first pair still", got.SerialNumber)
	}
	tick()
	if got := leaf(); !got.Equal(second.Leaf) {
		t.Errorf("after a check, served %s, want the second pair", got.SerialNumber)
	}
	if r.Leaf() != nil && !r.Leaf().Equal(second.Leaf) {
		t.Errorf("Leaf is %s, want the second pair", r.Leaf().SerialNumber)
	}

	// A broken pair: a new certificate whose key is another's.
	third, other := ca.Issue(t, "sandbox.test", time.Time{}), ca.Issue(t, "sandbox.test", time.Time{})
	certtest.WriteFile(t, certFile, third.Cert)
	certtest.WriteFile(t, keyFile, other.Key)
	for range 3 {
		tick()
		if got := leaf(); !got.Equal(second.Leaf) {
			t.Errorf("with a broken pair, served %s, want the second pair still", got.SerialNumber)
		}
	}
	if n := strings.Count(logs.String(), "new TLS certificate not loaded"); n != 1 {
		t.Errorf("the broken pair was logged %d times, want once:\n%s", n, logs.String())
	}
	// Files gone for a moment (a tool that deletes then writes): the same.
	if err := os.Remove(keyFile); err != nil {
		t.Fatal(err)
	}
	tick()
	if got := leaf(); !got.Equal(second.Leaf) {
		t.Errorf("with the key missing, served %s, want the second pair still", got.SerialNumber)
	}
	certtest.WriteFile(t, keyFile, third.Key)
	tick()
	if got := leaf(); !got.Equal(third.Leaf) {
		t.Errorf("once the pair is whole, served %s, want the third pair", got.SerialNumber)
	}
	if !strings.Contains(logs.String(), "TLS certificate reloaded") {
		t.Errorf("no reload logged:\n%s", logs.String())
	}
}

// TestNewReloaderRefuses: a pair that does not load at start is an error
// naming the files, not a server without a certificate.
func TestNewReloaderRefuses(t *testing.T) {
	ca := certtest.NewCA(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	a, b := ca.Issue(t, "", time.Time{}), ca.Issue(t, "", time.Time{})
	certtest.WriteFile(t, certFile, a.Cert)
	certtest.WriteFile(t, keyFile, b.Key)
	if _, err := NewReloader(certFile, keyFile, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), certFile) {
		t.Errorf("a mismatched pair: %v, want an error naming %s", err, certFile)
	}
	if _, err := NewReloader(filepath.Join(dir, "none.crt"), keyFile, slog.New(slog.DiscardHandler)); err == nil {
		t.Error("a missing certificate: no error")
	}
}

// TestPoolAndLeaf: a CA bundle reads into a pool that verifies the CA's
// leaves; a file without certificates is an error; Leaf reads a chain's
// first certificate.
func TestPoolAndLeaf(t *testing.T) {
	ca := certtest.NewCA(t)
	dir := t.TempDir()
	bundle := filepath.Join(dir, "ca.pem")
	certtest.WriteFile(t, bundle, append(certtest.NewCA(t).PEM, ca.PEM...))
	p, err := Pool(bundle)
	if err != nil {
		t.Fatal(err)
	}
	pair := ca.Issue(t, "sandbox.test", time.Now().Add(48*time.Hour).Truncate(time.Second))
	if _, err := pair.Leaf.Verify(x509.VerifyOptions{Roots: p, DNSName: "49999-i1.sandbox.test"}); err != nil {
		t.Errorf("the wildcard leaf against the bundle: %v", err)
	}
	empty := filepath.Join(dir, "empty.pem")
	certtest.WriteFile(t, empty, []byte("not a certificate\n"))
	if _, err := Pool(empty); err == nil {
		t.Error("a bundle without certificates: no error")
	}
	chain := filepath.Join(dir, "chain.pem")
	certtest.WriteFile(t, chain, append(append([]byte{}, pair.Cert...), ca.PEM...))
	leaf, err := Leaf(chain)
	if err != nil || !leaf.Equal(pair.Leaf) || !leaf.NotAfter.Equal(pair.Leaf.NotAfter) {
		t.Errorf("Leaf of a chain: %v, %v; want the first certificate", leaf, err)
	}
	if _, err := Leaf(empty); err == nil {
		t.Error("Leaf of a file without certificates: no error")
	}
}
