package main

import (
	"io"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/api"
)

// keyOut runs corral key with args and returns its status and stdout.
func keyOut(t *testing.T, args ...string) (int, string) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	code := cmdKey(args)
	os.Stdout = old
	w.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return code, string(b)
}

// TestKeyNew: a key of E2B's shape on the first line, then the hash the
// configuration holds, in a [[tenants]] block with --tenant; a tenant name
// that cannot be is refused.
func TestKeyNew(t *testing.T) {
	code, out := keyOut(t, "new")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 || !regexp.MustCompile(`^e2b_[0-9a-f]{40}$`).MatchString(lines[0]) ||
		!strings.HasPrefix(lines[1], `api_key_sha256 = ["`+api.HashKey(lines[0])+`"]`) {
		t.Fatalf("key new: %d\n%s", code, out)
	}
	code, out2 := keyOut(t, "new", "--tenant", "acme")
	lines = strings.Split(out2, "\n")
	if code != 0 || lines[0] == strings.Split(out, "\n")[0] ||
		!strings.Contains(out2, "[[tenants]]\nname           = \"acme\"\napi_key_sha256 = [\""+api.HashKey(lines[0])+"\"]\n") {
		t.Fatalf("key new --tenant acme: %d\n%s", code, out2)
	}
	for _, args := range [][]string{{"new", "--tenant", "a.b"}, {"new", "extra"}, {"old"}, {}} {
		if code, out := keyOut(t, args...); code == 0 || out != "" {
			t.Errorf("key %q: %d %q, want a refusal", args, code, out)
		}
	}
}
