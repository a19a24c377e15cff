package live

import (
	"path"
	"strings"
	"testing"
)

// FuzzSandboxPath: a path a client names is either refused or maps to an
// absolute, clean path outside the sandbox's kernel's and Corral's places;
// a relative one under /workspace.
func FuzzSandboxPath(f *testing.F) {
	for _, s := range []string{"a.txt", "d/e/f", "/workspace/x", "/tmp", "/workspace/../etc", "../x", "/etc/passwd",
		"a//b", "/workspace/", "\x00", "/tmp2/x", "./a", strings.Repeat("a/", 20), "/proc/1/root", "/.corral/agent", "/sys", "/devx"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		p, err := SandboxPath(in)
		if err != nil {
			return
		}
		if !path.IsAbs(p) || path.Clean(p) != p || strings.ContainsRune(p, 0) {
			t.Fatalf("%q → %q: not absolute and clean", in, p)
		}
		for _, root := range []string{"/proc", "/sys", "/dev", "/.corral"} {
			if p == root || strings.HasPrefix(p, root+"/") {
				t.Fatalf("%q → %q: in %s", in, p, root)
			}
		}
		if !strings.HasPrefix(in, "/") && !strings.HasPrefix(p, "/workspace/") {
			t.Fatalf("%q → %q: a relative path outside /workspace", in, p)
		}
	})
}

// FuzzParseSignal: a signal a client names is refused or a signal number
// between 1 and 64.
func FuzzParseSignal(f *testing.F) {
	for _, s := range []string{"SIGTERM", "term", "9", "0", "65", "-1", "SIG", "", "9x", " 15 "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		sig, err := ParseSignal(in)
		if err == nil && (sig < 1 || sig > 64) {
			t.Fatalf("%q → %d", in, sig)
		}
	})
}
