package api

import (
	"fmt"
	"net/http"
	"net/url"

	"github.com/corralhq/corral/internal/httpbody"
	"github.com/corralhq/corral/internal/validate"
	"github.com/corralhq/corral/sandbox"
)

// rules are /v1's: unknown fields are refused (a misspelt "limit"
// silently ignored would run with the defaults).
var rules = httpbody.Rules{KnownFields: true}

// decode reads a call's JSON body (httpbody: at most httpbody.MaxJSON,
// one value, unknown fields refused) into v and answers a bad one; it
// reports whether v was read. An empty body leaves v as it is.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := httpbody.ReadJSON(w, r, httpbody.MaxJSON, v, rules); err != nil {
		s.fail(w, err)
		return false
	}
	return true
}

// queryBool reads the flag name of r's query: absent, "false" or "0" is
// false, "true" or "1" true; anything else is refused naming it, never
// taken for false.
func queryBool(r *http.Request, name string) (bool, error) {
	switch r.URL.Query().Get(name) {
	case "", "false", "0":
		return false, nil
	case "true", "1":
		return true, nil
	}
	return false, refuse(name, "must be true or false")
}

// parseExecuteRequest decodes the body of a submission: one JSON object,
// required; every error is a fault for the caller (an invalid argument
// naming the field where one is known).
func parseExecuteRequest(body []byte) (sandbox.ExecuteRequest, error) {
	var req sandbox.ExecuteRequest
	if err := httpbody.Decode(body, &req, httpbody.Rules{KnownFields: true, Required: true}); err != nil {
		return req, err
	}
	if err := checkFields(&req); err != nil {
		return req, err
	}
	return req, nil
}

// checkFields validates what the engine does not: the parts of a request
// that are about the service rather than the program.
func checkFields(req *sandbox.ExecuteRequest) error {
	if req.CallbackURL != "" {
		if len(req.CallbackURL) > 2048 {
			return refuse("callback_url", "is longer than 2048 characters")
		}
		u, err := url.Parse(req.CallbackURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
			return refuse("callback_url", "must be an absolute http or https URL without credentials")
		}
	}
	// Input files' names and addresses are bounded as the request is
	// decoded; what a name or address says (a "..", a private address)
	// the engine checks, failing the execution with an input error.
	for i, f := range req.Files {
		if len(f.Path) > validate.MaxInputPath {
			return refuse(fmt.Sprintf("files[%d].path", i), fmt.Sprintf("is longer than %d bytes", validate.MaxInputPath))
		}
		if len(f.URL) > 2048 {
			return refuse(fmt.Sprintf("files[%d].url", i), "is longer than 2048 characters")
		}
	}
	return nil
}
