package api

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"github.com/corralhq/corral/internal/fault"
)

// Tenant is a customer of the service: its executions are invisible to
// every other tenant.
type Tenant struct {
	Name string
	// KeyHashes are SHA-256 hashes (hex) of the tenant's API keys; the keys
	// themselves are never stored.
	KeyHashes []string
	// CallbackSecret signs the tenant's callbacks; without it, requests
	// with a callback_url are refused.
	CallbackSecret []byte
}

var tenantName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// ValidTenantName reports whether name can be a tenant's: 1-63 lowercase
// letters, digits, - and _ (never a dot: E2B's access tokens end the
// tenant's name with one).
func ValidTenantName(name string) bool { return tenantName.MatchString(name) }

// Auth maps API keys to tenants.
type Auth struct {
	byHash  map[[32]byte]*Tenant
	tenants map[string]*Tenant
}

// HashKey returns the hex SHA-256 of an API key, as config files hold it.
func HashKey(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:])
}

// NewAuth checks the tenants and indexes their keys.
func NewAuth(tenants []Tenant) (*Auth, error) {
	a := &Auth{byHash: map[[32]byte]*Tenant{}, tenants: map[string]*Tenant{}}
	for i := range tenants {
		t := &tenants[i]
		if !tenantName.MatchString(t.Name) {
			return nil, fmt.Errorf("tenant name %q: use 1-63 lowercase letters, digits, - and _", t.Name)
		}
		if _, dup := a.tenants[t.Name]; dup {
			return nil, fmt.Errorf("tenant %q defined twice", t.Name)
		}
		a.tenants[t.Name] = t
		for _, h := range t.KeyHashes {
			b, err := hex.DecodeString(strings.TrimPrefix(h, "sha256:"))
			if err != nil || len(b) != 32 {
				return nil, fmt.Errorf("tenant %q: api key hash %q is not a hex SHA-256", t.Name, h)
			}
			var k [32]byte
			copy(k[:], b)
			if other, dup := a.byHash[k]; dup {
				return nil, fmt.Errorf("an api key is shared by tenants %q and %q", other.Name, t.Name)
			}
			a.byHash[k] = t
		}
	}
	if len(a.byHash) == 0 {
		return nil, fmt.Errorf("no api keys configured: set CORRAL_API_KEY or add tenants to the config file")
	}
	return a, nil
}

// Authenticate returns the tenant of the request's bearer key.
func (a *Auth) Authenticate(r *http.Request) (*Tenant, *Error) {
	key := bearerKey(r)
	if key == "" {
		return nil, answer(fault.New(fault.Unauthenticated, "send an API key as Authorization: Bearer <key>"))
	}
	t := a.lookup(key)
	if t == nil {
		return nil, answer(fault.New(fault.Unauthenticated, "unknown API key"))
	}
	return t, nil
}

// bearerKey is the key of the request's Authorization: Bearer header, ""
// if it has none.
func bearerKey(r *http.Request) string {
	scheme, key, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(key)
}

// lookup is the one place an API key becomes a tenant: nil if the key is
// unknown.
func (a *Auth) lookup(key string) *Tenant {
	if key == "" {
		return nil
	}
	return a.byHash[sha256.Sum256([]byte(key))]
}

// TenantOf returns the name of the tenant whose API key key is, for
// callers that take the key from elsewhere than Authorization (E2B's
// X-API-Key).
func (a *Auth) TenantOf(key string) (string, bool) {
	if t := a.lookup(key); t != nil {
		return t.Name, true
	}
	return "", false
}

// Secret returns a tenant's callback signing secret.
func (a *Auth) Secret(tenant string) []byte {
	if t := a.tenants[tenant]; t != nil {
		return t.CallbackSecret
	}
	return nil
}
