package netpolicy

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"
)

func TestPublic(t *testing.T) {
	for addr, want := range map[string]bool{
		"8.8.8.8": true, "1.1.1.1": true, "2606:4700::1111": true,
		"127.0.0.1": false, "::1": false, "10.1.2.3": false, "172.16.0.1": false, "192.168.1.1": false,
		"169.254.169.254": false, "fe80::1": false, "fd00::1": false, "0.0.0.0": false, "::": false,
		"100.64.0.1": false, "224.0.0.1": false, "255.255.255.255": false, "::ffff:127.0.0.1": false,
		"::ffff:169.254.169.254": false, "198.18.0.1": false,
	} {
		if got := Public(netip.MustParseAddr(addr)); got != want {
			t.Errorf("Public(%s) = %v, want %v", addr, got, want)
		}
	}
}

func TestGuardRefusesLoopback(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	_, err := Guard{}.Client(5 * time.Second).Get(srv.URL)
	if !errors.Is(err, ErrForbidden) {
		t.Errorf("GET %s: %v, want ErrForbidden", srv.URL, err)
	}
	resp, err := Guard{AllowPrivate: true}.Client(5 * time.Second).Get(srv.URL)
	if err != nil {
		t.Fatalf("allowed: %v", err)
	}
	resp.Body.Close()
}

func TestGuardChecksRedirectTargets(t *testing.T) {
	// A redirect chain longer than the bound is cut.
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, srv.URL+"/again", http.StatusFound)
	}))
	defer srv.Close()
	_, err := Guard{AllowPrivate: true}.Client(5 * time.Second).Get(srv.URL)
	if err == nil {
		t.Error("endless redirects followed")
	}
}
