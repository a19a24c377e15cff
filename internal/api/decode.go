package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/corralhq/corral/sandbox"
)

// decodeExecuteRequest reads one JSON request object of at most max bytes.
// Unknown fields are refused (a misspelt "limit" silently ignored would
// run with the defaults); every error is a 4xx *Error naming the field
// where one is known.
func decodeExecuteRequest(r io.Reader, max int64) (sandbox.ExecuteRequest, *Error) {
	body, err := readBody(r, max)
	if err != nil {
		return sandbox.ExecuteRequest{}, err
	}
	return parseExecuteRequest(body)
}

// readBody reads a request body of at most max bytes.
func readBody(r io.Reader, max int64) ([]byte, *Error) {
	body, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, tooLarge(max)
		}
		return nil, badJSON("could not read the request body")
	}
	if int64(len(body)) > max {
		return nil, tooLarge(max)
	}
	return body, nil
}

// parseExecuteRequest decodes the body of a submission.
func parseExecuteRequest(body []byte) (sandbox.ExecuteRequest, *Error) {
	var req sandbox.ExecuteRequest
	if len(bytes.TrimSpace(body)) == 0 {
		return req, badJSON("the request body is empty; send a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, jsonError(err)
	}
	if dec.More() {
		return req, badJSON("the body holds more than one JSON value")
	}
	if err := checkFields(&req); err != nil {
		return req, err
	}
	return req, nil
}

func jsonError(err error) *Error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return badJSON(fmt.Sprintf("malformed JSON at byte %d: %v", se.Offset, se))
	case errors.As(err, &te):
		field := te.Field
		return refuse(field, fmt.Sprintf("%s must be %s, not %s", field, te.Type, te.Value))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badJSON("the JSON body ends too early")
	//lint:allow-error-text encoding/json reports an unknown field only as text
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return refuse(field, fmt.Sprintf("unknown field %q", field))
	default:
		return badJSON("the body is not a valid request object: " + err.Error())
	}
}

// checkFields validates what the engine does not: the parts of a request
// that are about the service rather than the program.
func checkFields(req *sandbox.ExecuteRequest) *Error {
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
