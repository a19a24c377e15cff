package httpbody

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"

	"github.com/corralhq/corral/internal/fault"
)

// Rules say how a JSON body is decoded beyond the one strict rule of all:
// exactly one JSON value, with nothing but white space after it.
type Rules struct {
	// KnownFields refuses a field the value has not (/v1: a misspelt
	// "limit" silently ignored would run with the defaults). E2B's wires
	// take unknown fields: their SDKs send more than Corral reads.
	KnownFields bool
	// Required refuses an empty body; without it, an empty body (or one
	// of white space alone) leaves the value as it is.
	Required bool
}

// MaxJSON caps a JSON body on every wire (/v1's calls but a submission,
// whose cap is max_body_bytes; E2B's REST API and code interpreter): a
// cell's code (1 MiB, internal/kernel) JSON-escaped, and room for the
// rest. Every field has a bound of its own, far below it, checked as the
// call is decoded; this cap only stops a body too large to read.
const MaxJSON = 2<<20 + 64<<10

// ErrJSON: the body is not the JSON value the call takes. Its code,
// invalid_json, is /v1's; the other wires answer its kind.
var ErrJSON = &fault.Error{Kind: fault.InvalidArgument, Code: "invalid_json",
	Message: "the request body is not the JSON object expected"}

// jsonSpace is what JSON counts as white space (RFC 8259); no other byte
// may follow a value.
const jsonSpace = " \t\r\n"

// Decode decodes body, a whole request body, into v by rules. Every error
// is an invalid argument: ErrJSON (malformed, empty when required, more
// than one value, trailing data), or a fault naming the field whose value
// has the wrong type or which v has not (KnownFields).
func Decode(body []byte, v any, rules Rules) error {
	if len(bytes.TrimLeft(body, jsonSpace)) == 0 {
		if rules.Required {
			return ErrJSON.With("", "the request body is empty; send a JSON object")
		}
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if rules.KnownFields {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		return jsonFault(err)
	}
	if rest := bytes.TrimLeft(body[dec.InputOffset():], jsonSpace); len(rest) > 0 {
		return ErrJSON.With("", "the request body holds more than one JSON value, or data after it (at byte %d)",
			int64(len(body)-len(rest)))
	}
	return nil
}

// ReadJSON reads r's body (at most max bytes, Read) and decodes it into v
// by rules (Decode).
func ReadJSON(w http.ResponseWriter, r *http.Request, max int64, v any, rules Rules) error {
	body, err := Read(w, r, max)
	if err != nil {
		return err
	}
	return Decode(body, v, rules)
}

// unknownField is how encoding/json words a field the value has not (it
// has no error type for it).
const unknownField = "json: unknown field "

// jsonFault is the fault of a decoding error.
func jsonFault(err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Errorf("%w: %w", ErrJSON.With("", "malformed JSON at byte %d: %v", se.Offset, se), err)
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			return fmt.Errorf("%w: %w", ErrJSON.With("", "the request body must be %s, not %s", jsonType(te), te.Value), err)
		}
		return fault.Invalid(field, "%s must be %s, not %s", field, jsonType(te), te.Value)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%w: %w", ErrJSON.With("", "the JSON body ends too early"), err)
	//lint:allow-error-text encoding/json reports an unknown field only as text
	case strings.HasPrefix(err.Error(), unknownField):
		field := strings.Trim(strings.TrimPrefix(err.Error(), unknownField), `"`)
		return fault.Invalid(field, "unknown field %q", field)
	}
	// A value's own UnmarshalJSON refused it: its words are written for
	// the caller (a proto3 scalar, an enum's name).
	return fmt.Errorf("%w: %w", ErrJSON.With("", "the request body is not a valid request object: %v", err), err)
}

// jsonType names the JSON a Go type takes, for a refusal: "an integer
// in range", not "int64".
func jsonType(te *json.UnmarshalTypeError) string {
	t := te.Type
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return "another type"
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer in range"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "another type"
}
