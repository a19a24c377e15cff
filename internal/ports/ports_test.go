package ports

import (
	"net/url"
	"strings"
	"testing"
)

func TestCheckPath(t *testing.T) {
	for _, c := range []struct {
		path string
		ok   bool
	}{
		{"/", true},
		{"/index.html", true},
		{"/a/b/c?x", true},
		{"/a%2Fb", true},
		{"/.well-known/x", true},
		{"/a/..b/c", true},
		{"/a/../b", false},
		{"/a/%2E%2E/b", false},
		{"/..", false},
		{"/%2e%2E", false},
		{"/a%00b", false},
		{"/a%zz", false},
		{"/" + strings.Repeat("a", MaxPath), false},
	} {
		if err := CheckPath(c.path); (err == nil) != c.ok {
			t.Errorf("CheckPath(%q) = %v, want ok %v", c.path, err, c.ok)
		}
	}
}

func TestPort(t *testing.T) {
	for _, c := range []struct {
		s    string
		want int
	}{
		{"1", 1}, {"8000", 8000}, {"65535", 65535},
		{"0", 0}, {"65536", 0}, {"-1", 0}, {"08000", 0}, {"+80", 0}, {"x", 0}, {"", 0}, {"99999999999999999999", 0},
	} {
		got, err := Port(c.s)
		if got != c.want || (err == nil) != (c.want != 0) {
			t.Errorf("Port(%q) = %d, %v; want %d", c.s, got, err, c.want)
		}
	}
}

// FuzzCheckPath: a path CheckPath passes unescapes, within MaxPath, to
// one without NUL or a dot-dot segment.
func FuzzCheckPath(f *testing.F) {
	for _, s := range []string{"/", "/a/../b", "/%2E%2E", "/a%00", "/a%2Fb", "/%"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if CheckPath(s) != nil {
			return
		}
		p, err := url.PathUnescape(s)
		if err != nil || len(s) > MaxPath || strings.ContainsRune(p, 0) {
			t.Fatalf("CheckPath passed %q", s)
		}
		for _, seg := range strings.Split(p, "/") {
			if seg == ".." {
				t.Fatalf("CheckPath passed %q: a dot-dot segment", s)
			}
		}
	})
}
