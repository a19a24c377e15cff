// Package ui is the dashboard served at /ui/: static HTML, CSS and
// JavaScript embedded in the binary, nothing loaded from elsewhere. It holds
// no data and no logic of the server's: the page signs in with an API key
// (kept in the tab's sessionStorage) and calls the tenant-scoped /v1 API
// with it, so a tenant sees exactly what its key may see. Every response
// carries a strict Content-Security-Policy: scripts and styles only from
// these files, connections only to this origin, and Trusted Types required,
// so program output can only ever reach the page as text.
package ui

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed static
var static embed.FS

// CSP is the Content-Security-Policy of every dashboard response: every
// resource from this origin only, no inline script or style and no eval
// (neither 'unsafe-inline' nor 'unsafe-eval' appears), no plugins, no
// framing. require-trusted-types-for makes the browser refuse any string
// assigned to an HTML sink (innerHTML and the like), and trusted-types
// 'none' allows no policy that could bless one: the page builds its DOM
// with createElement and textContent only.
const CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"object-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'; " +
	"require-trusted-types-for 'script'; trusted-types 'none'"

// Handler serves the dashboard's files; mount it at /ui/.
func Handler() http.Handler {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.StripPrefix("/ui/", http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", CSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		// Files change with the binary; revalidate so an upgrade shows.
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}
