package live

import (
	"errors"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/session"

	"github.com/corralhq/corral/sandbox"
)

// TestAccessToken: a live sandbox has no token until one is set; the token
// is its tenant's only, survives the node's restart, is replaced by the
// next, refuses bad values, and goes with the sandbox.
func TestAccessToken(t *testing.T) {
	u := newUnit(t)
	u.create(sandbox.CreateSandboxRequest{SandboxID: "box"})
	ctx := t.Context()

	if tok, err := u.m.AccessToken("t", "box"); err != nil || tok != "" {
		t.Fatalf("AccessToken before any was set = %q, %v; want \"\", nil", tok, err)
	}
	if err := u.m.SetAccessToken("t", "box", "t.abc123"); err != nil {
		t.Fatal(err)
	}
	if tok, err := u.m.AccessToken("t", "box"); err != nil || tok != "t.abc123" {
		t.Fatalf("AccessToken = %q, %v; want t.abc123", tok, err)
	}
	// Another tenant's view: no such sandbox.
	if _, err := u.m.AccessToken("other", "box"); !errors.Is(err, ErrNotFound) {
		t.Errorf("AccessToken of another tenant: err = %v, want ErrNotFound", err)
	}
	if err := u.m.SetAccessToken("other", "box", "x"); !errors.Is(err, ErrNotFound) {
		t.Errorf("SetAccessToken of another tenant: err = %v, want ErrNotFound", err)
	}
	for _, bad := range []string{"", "a b", "a\nb", strings.Repeat("a", maxAccessToken+1), "é"} {
		if err := u.m.SetAccessToken("t", "box", bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("SetAccessToken(%q): err = %v, want ErrInvalid", bad, err)
		}
	}
	if tok, _ := u.m.AccessToken("t", "box"); tok != "t.abc123" {
		t.Fatalf("a refused token changed the token to %q", tok)
	}

	// A restart of the node: read again from the sandbox's directory.
	u.restart()
	if tok, err := u.m.AccessToken("t", "box"); err != nil || tok != "t.abc123" {
		t.Fatalf("AccessToken after a restart = %q, %v; want t.abc123", tok, err)
	}
	if err := u.m.SetAccessToken("t", "box", "t.def456"); err != nil {
		t.Fatal(err)
	}
	if tok, _ := u.m.AccessToken("t", "box"); tok != "t.def456" {
		t.Fatalf("AccessToken after a second Set = %q, want t.def456", tok)
	}

	// Gone with the sandbox: a sandbox made again with the same id starts
	// without one.
	if err := u.m.Delete(ctx, "t", "box"); err != nil {
		t.Fatal(err)
	}
	if _, err := u.m.AccessToken("t", "box"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("AccessToken of a deleted sandbox: err = %v, want ErrNotFound", err)
	}
	u.create(sandbox.CreateSandboxRequest{SandboxID: "box"})
	if tok, err := u.m.AccessToken("t", "box"); err != nil || tok != "" {
		t.Fatalf("AccessToken of the sandbox made again = %q, %v; want \"\"", tok, err)
	}

	// Not a live sandbox (a session of executions): no token.
	if _, _, err := u.m.Touch(ctx, "t", "sess", session.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := u.m.SetAccessToken("t", "sess", "t.x"); !errors.Is(err, ErrNotFound) {
		t.Errorf("SetAccessToken of a session that is no live sandbox: err = %v, want ErrNotFound", err)
	}
}
