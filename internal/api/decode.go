package api

import (
	"net/http"
	"net/url"

	"github.com/corralhq/corral/internal/httpbody"
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
	return nil
}
