//go:build linux

package agent

import (
	"path"
	"strings"
	"testing"
)

// FuzzPath: a path the host names is refused, or it lies under one of the
// writable roots, absolute and clean, both for the file calls (checkPath)
// and for the live file operations (confine), whose components are then
// names to step through one at a time: never empty, "." or "..".
func FuzzPath(f *testing.F) {
	for _, s := range []string{"/workspace/a", "/tmp/x/y", "/workspace", "/tmp", "/workspace/../etc/passwd", "/etc/passwd",
		"workspace/a", "/workspace//a", "/workspace/./a", "/workspacex/a", "/tmp/\x00", ""} {
		f.Add(s)
	}
	under := func(p string) bool {
		for _, root := range writableRoots {
			if p == root || strings.HasPrefix(p, root+"/") {
				return true
			}
		}
		return false
	}
	f.Fuzz(func(t *testing.T, p string) {
		if checkPath(p) == nil && (!path.IsAbs(p) || path.Clean(p) != p || !under(p) || p == "/workspace" || p == "/tmp") {
			t.Fatalf("checkPath accepts %q", p)
		}
		for _, rootOK := range []bool{false, true} {
			root, comps, err := confine(p, rootOK)
			if err != nil {
				continue
			}
			if !under(p) || path.Clean(p) != p || path.Join(append([]string{root}, comps...)...) != p || (len(comps) == 0 && !rootOK) {
				t.Fatalf("confine(%q, %v) = %q %q", p, rootOK, root, comps)
			}
			for _, c := range comps {
				if c == "" || c == "." || c == ".." || strings.Contains(c, "/") {
					t.Fatalf("confine(%q) has the component %q", p, c)
				}
			}
		}
	})
}
