package mcp

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/corralhq/corral/sandbox"
	gomcp "github.com/modelcontextprotocol/go-sdk/mcp"
)

// A tool call ends in one of three ways:
//
//   - a result: the call worked, even when the program it ran failed (that
//     result has isError set and its summary says why and what to do);
//   - a result with isError and no record, when the call itself could not
//     be served: arguments the tool cannot use (naming the argument;
//     Corral's own 4xx answers count), a Corral server that is busy (or
//     still installing the tier the code needs),
//     unreachable, failing or refusing the API key. The model reads the
//     text and can correct the call or tell its user (MCP 2025-11-25,
//     SEP-1303: input validation errors are tool execution errors). The
//     result's _meta["corral/error"] says which, for programs:
//     {"reason": "invalid_arguments", "field": ...};
//   - a protocol error only when the client itself went away (its context
//     ended), or for what the go-sdk answers before a tool runs (an unknown
//     tool, a malformed request).

// MetaError is the _meta key of a tool error's errorData.
const MetaError = "corral/error"

// Reasons in the errorData of tool errors.
const (
	ReasonInvalidArguments  = "invalid_arguments"
	ReasonCorralUnavailable = "corral_unavailable"
	ReasonBusy              = "busy"
)

// argError is an argument a tool cannot use.
type argError struct {
	field string // the argument, e.g. files[0].content_base64; may be empty
	msg   string
}

func (e *argError) Error() string {
	if e.field == "" {
		return e.msg
	}
	return e.field + ": " + e.msg
}

// errorData is what _meta["corral/error"] of a tool error holds.
type errorData struct {
	Reason   string `json:"reason"`
	Field    string `json:"field,omitempty"`
	Endpoint string `json:"endpoint,omitempty"`
	Status   int    `json:"status,omitempty"`
	Code     string `json:"code,omitempty"`
}

// toolError is a result with isError whose text is msg.
func toolError(msg string, data errorData) *gomcp.CallToolResult {
	return &gomcp.CallToolResult{
		Content: []gomcp.Content{&gomcp.TextContent{Text: msg}},
		IsError: true,
		Meta:    gomcp.Meta{MetaError: data},
	}
}

// invalidArgs is the tool error for arguments the tool cannot use.
func invalidArgs(tool string, err error) *gomcp.CallToolResult {
	data := errorData{Reason: ReasonInvalidArguments}
	var ae *argError
	if errors.As(err, &ae) {
		data.Field = ae.field
	}
	return toolError(fmt.Sprintf("invalid arguments for %s: %v. Fix them and call %s again.", tool, err, tool), data)
}

// callFailed answers a call to Corral that returned err (never a
// *sandbox.Error: failed executions are records). Only a client that went
// away gets a Go error back.
func (s *Server) callFailed(tool string, err error) (*gomcp.CallToolResult, error) {
	var ae *sandbox.APIError
	var te *sandbox.TransportError
	switch {
	case errors.As(err, &ae):
		data := errorData{Endpoint: s.endpoint, Status: ae.Status, Code: ae.Code}
		switch {
		case ae.Status == http.StatusUnauthorized || ae.Status == http.StatusForbidden:
			data.Reason = ReasonCorralUnavailable
			return toolError(fmt.Sprintf("The Corral server at %s refused corral mcp's API key (%d %s). "+
				"This is a set-up problem the code cannot fix: tell the user to set CORRAL_API_KEY for corral mcp.",
				s.endpoint, ae.Status, ae.Code), data), nil
		case ae.Status == http.StatusTooManyRequests, errors.Is(ae, sandbox.ErrTierUnavailable):
			// Both pass with time: gVisor being installed is no failure.
			data.Reason = ReasonBusy
			msg := fmt.Sprintf("The Corral server is busy (%s): %s.", ae.Code, ae.Message)
			if ae.RetryAfter > 0 {
				msg += fmt.Sprintf(" Retry %s in %s.", tool, ae.RetryAfter)
			} else {
				msg += fmt.Sprintf(" Retry %s later.", tool)
			}
			return toolError(msg, data), nil
		case ae.Status >= 500:
			data.Reason = ReasonCorralUnavailable
			return toolError(fmt.Sprintf("The Corral server at %s failed (%d %s): %s. Retry %s; if it keeps failing, tell the user.",
				s.endpoint, ae.Status, ae.Code, ae.Message, tool), data), nil
		}
		data.Reason, data.Field = ReasonInvalidArguments, ae.Field
		msg := ae.Message
		if msg == "" {
			msg = ae.Code
		}
		if ae.Field != "" {
			msg = ae.Field + ": " + msg
		}
		return toolError(fmt.Sprintf("invalid arguments for %s: Corral refused them (%d %s): %s. Fix them and call %s again.",
			tool, ae.Status, ae.Code, msg, tool), data), nil
	case errors.Is(err, context.Canceled):
		// The client gave up; nobody reads this answer.
		return nil, err
	case errors.As(err, &te), errors.Is(err, context.DeadlineExceeded):
		return toolError(fmt.Sprintf("The Corral server is unreachable at %s: %v. "+
			"This is a set-up problem the code cannot fix: tell the user to start corral serve there or to point CORRAL_ENDPOINT at a running server.",
			s.endpoint, err), errorData{Reason: ReasonCorralUnavailable, Endpoint: s.endpoint}), nil
	}
	// The SDK's own refusals, such as a directory given to read_file.
	return invalidArgs(tool, err), nil
}
