package api

import (
	"net/http"
	"strings"
	"testing"
)

// TestNewAuth: what a tenant list may hold.
func TestNewAuth(t *testing.T) {
	h := HashKey("k")
	for _, tc := range []struct {
		name    string
		tenants []Tenant
		ok      bool
	}{
		{"one tenant", []Tenant{{Name: "acme", KeyHashes: []string{h}}}, true},
		{"a hash written sha256:HEX", []Tenant{{Name: "acme", KeyHashes: []string{"sha256:" + h}}}, true},
		{"a tenant without keys beside one with", []Tenant{{Name: "a", KeyHashes: []string{h}}, {Name: "b"}}, true},
		{"no keys at all", []Tenant{{Name: "acme"}}, false},
		{"nothing", nil, false},
		{"an upper-case name", []Tenant{{Name: "Acme", KeyHashes: []string{h}}}, false},
		{"a dot in the name", []Tenant{{Name: "a.b", KeyHashes: []string{h}}}, false},
		{"a name too long", []Tenant{{Name: strings.Repeat("a", 64), KeyHashes: []string{h}}}, false},
		{"a tenant twice", []Tenant{{Name: "a", KeyHashes: []string{h}}, {Name: "a"}}, false},
		{"a hash that is not hex", []Tenant{{Name: "a", KeyHashes: []string{"zz"}}}, false},
		{"a hash of the wrong length", []Tenant{{Name: "a", KeyHashes: []string{h[:62]}}}, false},
		{"one key for two tenants", []Tenant{{Name: "a", KeyHashes: []string{h}}, {Name: "b", KeyHashes: []string{h}}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewAuth(tc.tenants)
			if (err == nil) != tc.ok {
				t.Errorf("NewAuth = %v; want ok %v", err, tc.ok)
			}
		})
	}
	if !ValidTenantName("a-b_9") || ValidTenantName("-a") || ValidTenantName("") {
		t.Error("ValidTenantName disagrees with the tenant names NewAuth takes")
	}
}

// TestAuthKeys: the key is looked up by its hash, for the API and for
// callers that take it from elsewhere (E2B's X-API-Key); each tenant has
// its own callback secret.
func TestAuthKeys(t *testing.T) {
	a := testAuth(t)
	for key, want := range map[string]string{keyAlpha: "alpha", keyBeta: "beta"} {
		if got, ok := a.TenantOf(key); !ok || got != want {
			t.Errorf("TenantOf(%s) = %q, %v; want %s", key, got, ok, want)
		}
	}
	for _, key := range []string{"", "nope", keyAlpha + " ", HashKey(keyAlpha)} {
		if got, ok := a.TenantOf(key); ok {
			t.Errorf("TenantOf(%q) = %q; want no tenant", key, got)
		}
	}
	if string(a.Secret("alpha")) != "alpha-secret" || a.Secret("beta") != nil || a.Secret("gamma") != nil {
		t.Errorf("secrets: alpha %q, beta %q, gamma %q", a.Secret("alpha"), a.Secret("beta"), a.Secret("gamma"))
	}
}

// TestAuthenticate: every /v1 call needs a known key as a bearer token;
// the key's tenant is the caller.
func TestAuthenticate(t *testing.T) {
	s := newStack(t, func(o *options) { o.idle = true })
	for _, tc := range []struct {
		name, header string
	}{
		{"none", ""},
		{"another scheme", "Basic " + keyAlpha},
		{"no key", "Bearer "},
		{"no space", "Bearer" + keyAlpha},
		{"an unknown key", "Bearer not-a-key"},
		{"the key's hash", "Bearer " + HashKey(keyAlpha)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var hdr []string
			if tc.header != "" {
				hdr = []string{"Authorization", tc.header}
			}
			for _, path := range []string{"/v1/executions", "/v1/sandboxes", "/v1/stats", "/v1/sessions/s1"} {
				s.fail("", "GET", path, "", http.StatusUnauthorized, "unauthorized", hdr...)
			}
		})
	}
	// The scheme is case-insensitive; spaces around the key do not count.
	s.call("", "GET", "/v1/executions", "", http.StatusOK, nil, "Authorization", "bearer  "+keyAlpha+" ")
	s.call(keyBeta, "GET", "/v1/executions", "", http.StatusOK, nil)
}
