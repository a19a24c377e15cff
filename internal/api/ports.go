package api

import (
	"net/http"
	"strings"

	"github.com/corralhq/corral/internal/ports"
)

// sandboxPort serves /v1/sandboxes/{id}/ports/{port}/{path...}: the
// request goes to the server listening on that port in the sandbox, with
// /{path} as its path (internal/ports). The API key opens it, and does
// not reach the sandbox.
func (s *Server) sandboxPort(w http.ResponseWriter, r *http.Request, t *Tenant) {
	if !s.sandboxesOn(w) {
		return
	}
	id, ok := s.sessionID(w, r)
	if !ok {
		return
	}
	port, err := ports.Port(r.PathValue("port"))
	if err != nil {
		s.fail(w, err)
		return
	}
	// Escaped as it came: /{id}/ports/{port} are the first five
	// segments.
	segs := strings.SplitN(r.URL.EscapedPath(), "/", 7)
	path := "/"
	if len(segs) == 7 {
		path += segs[6]
	}
	if err := ports.CheckPath(path); err != nil {
		s.fail(w, err)
		return
	}
	if !s.route(w, r, t, id, sandboxCall) {
		return
	}
	sb, err := s.box(t, id)
	if err != nil {
		s.fail(w, err)
		return
	}
	s.ports.Serve(w, r, ports.Request{Sandbox: sb, Port: port, Path: path, Strip: []string{"Authorization"}, Fail: s.fail})
}
