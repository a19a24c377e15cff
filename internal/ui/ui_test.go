package ui

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func TestHeaders(t *testing.T) {
	h := Handler()
	for _, tt := range []struct {
		path, contentType string
		status            int
	}{
		{"/ui/", "text/html; charset=utf-8", http.StatusOK},
		{"/ui/app.js", "text/javascript; charset=utf-8", http.StatusOK},
		{"/ui/app.css", "text/css; charset=utf-8", http.StatusOK},
		{"/ui/favicon.svg", "image/svg+xml", http.StatusOK},
		{"/ui/nothing-here", "text/plain; charset=utf-8", http.StatusNotFound},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tt.path, nil))
		res := rec.Result()
		if res.StatusCode != tt.status || res.Header.Get("Content-Type") != tt.contentType {
			t.Errorf("GET %s: %d %q, want %d %q", tt.path, res.StatusCode, res.Header.Get("Content-Type"), tt.status, tt.contentType)
		}
		// Every answer carries the policy, errors included.
		for k, want := range map[string]string{"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
			"X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer"} {
			if got := res.Header.Get(k); got != want {
				t.Errorf("GET %s: %s = %q, want %q", tt.path, k, got, want)
			}
		}
	}
}

// TestCSP pins what the policy must say and must never say.
func TestCSP(t *testing.T) {
	directives := map[string]string{}
	for _, d := range strings.Split(CSP, ";") {
		name, value, _ := strings.Cut(strings.TrimSpace(d), " ")
		directives[name] = value
	}
	for name, want := range map[string]string{"default-src": "'self'", "script-src": "'self'", "style-src": "'self'",
		"connect-src": "'self'", "object-src": "'none'", "frame-ancestors": "'none'", "base-uri": "'none'",
		"require-trusted-types-for": "'script'", "trusted-types": "'none'"} {
		if directives[name] != want {
			t.Errorf("%s = %q, want %q", name, directives[name], want)
		}
	}
	for _, bad := range []string{"unsafe-inline", "unsafe-eval", "unsafe-hashes", "wasm-unsafe-eval", "data:", "http:", "https:", "*"} {
		if strings.Contains(CSP, bad) {
			t.Errorf("the CSP allows %s", bad)
		}
	}
}

// TestAssets reads the embedded files for what the CSP would refuse or
// what could turn program output into markup: inline scripts, event
// handler or style attributes, HTML sinks, eval, anything from elsewhere.
func TestAssets(t *testing.T) {
	read := func(name string) string {
		f, err := static.Open("static/" + name)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		b, err := io.ReadAll(f)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	html, js := read("index.html"), read("app.js")
	for _, tt := range []struct {
		what, text string
		re         *regexp.Regexp
	}{
		{"inline script", html, regexp.MustCompile(`<script(?:\s[^>]*)?>\s*[^<\s]`)},
		{"script without src", html, regexp.MustCompile(`<script(?:(?:\s(?:defer|type="[^"]*"))*)>`)},
		{"event handler attribute", html, regexp.MustCompile(`(?i)\son[a-z]+\s*=`)},
		{"style attribute or element", html, regexp.MustCompile(`(?i)\sstyle\s*=|<style`)},
		{"javascript: URL", html + js, regexp.MustCompile(`(?i)javascript:`)},
		{"HTML sink", js, regexp.MustCompile(`\.(innerHTML|outerHTML|insertAdjacentHTML)\b|document\.write|DOMParser|createContextualFragment|srcdoc`)},
		{"eval", js, regexp.MustCompile(`\beval\(|new Function|set(Timeout|Interval)\(\s*["'\x60]`)},
		{"Trusted Types policy", js, regexp.MustCompile(`trustedTypes`)},
	} {
		if loc := tt.re.FindStringIndex(tt.text); loc != nil {
			t.Errorf("%s: %q", tt.what, tt.text[loc[0]:min(len(tt.text), loc[1]+40)])
		}
	}
	// Nothing is loaded from another origin: no absolute or
	// protocol-relative URL in any asset (the SVG's namespace aside).
	ext := regexp.MustCompile(`(?i)(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}`)
	err := fs.WalkDir(static, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		text := read(strings.TrimPrefix(p, "static/"))
		text = strings.ReplaceAll(text, `xmlns="http://www.w3.org/2000/svg"`, "")
		if m := ext.FindString(text); m != "" {
			t.Errorf("%s refers to %s", p, m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
