//go:build linux

package agent

import (
	"path"
	"strings"
	"testing"
)

// FuzzPath: a path the host names is refused, or it lies under one of the
// writable roots (for a system sandbox's agent: anywhere but under
// systemPlaces), absolute and clean, both for the file calls (checkPath)
// and for the live file operations (confine), whose components are then
// names to step through one at a time: never empty, "." or "..".
func FuzzPath(f *testing.F) {
	for _, s := range []string{"/workspace/a", "/tmp/x/y", "/workspace", "/tmp", "/workspace/../etc/passwd", "/etc/passwd",
		"workspace/a", "/workspace//a", "/workspace/./a", "/workspacex/a", "/tmp/\x00", "", "/", "/proc/1/environ", "/proc",
		"/dev/../etc", "/.corral/x", "/.corralx", "/sysx/y"} {
		f.Add(s)
	}
	under := func(roots []string, p string) bool {
		for _, root := range roots {
			if p == root || strings.HasPrefix(p, root+"/") {
				return true
			}
		}
		return false
	}
	f.Fuzz(func(t *testing.T, p string) {
		for _, a := range []*Agent{{}, {users: true}} {
			allowed := func(p string) bool {
				if a.users {
					return !under(systemPlaces, p) && !strings.ContainsRune(p, 0)
				}
				return under(writableRoots, p)
			}
			isRoot := p == "/" || (!a.users && (p == "/workspace" || p == "/tmp"))
			if a.checkPath(p) == nil && (!path.IsAbs(p) || path.Clean(p) != p || !allowed(p) || isRoot) {
				t.Fatalf("checkPath (users %v) accepts %q", a.users, p)
			}
			for _, rootOK := range []bool{false, true} {
				root, comps, err := a.confine(p, rootOK)
				if err != nil {
					continue
				}
				if !allowed(p) || path.Clean(p) != p || path.Join(append([]string{root}, comps...)...) != p || (len(comps) == 0 && !rootOK) {
					t.Fatalf("confine(%q, %v) (users %v) = %q %q", p, rootOK, a.users, root, comps)
				}
				for _, c := range comps {
					if c == "" || c == "." || c == ".." || strings.Contains(c, "/") {
						t.Fatalf("confine(%q) has the component %q", p, c)
					}
				}
			}
		}
	})
}
