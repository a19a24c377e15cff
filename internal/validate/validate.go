// Package validate holds the checks of request fields that more than one
// part of Corral applies (ids, environment variables, relative paths) and
// InputError, the refusal of one field: an invalid argument of
// internal/fault that names the field, so a client or a model can fix it.
package validate

import (
	"fmt"
	"regexp"

	"github.com/corralhq/corral/internal/fault"
)

// InputError is a request field refused: Field names it (e.g.
// "limits.memory_mb"), Message says what is wrong with it.
type InputError struct {
	Field   string
	Message string
}

// Refuse returns the InputError of field.
func Refuse(field, format string, args ...any) *InputError {
	return &InputError{Field: field, Message: fmt.Sprintf(format, args...)}
}

func (e *InputError) Error() string {
	if e.Field == "" {
		return e.Message
	}
	return e.Field + ": " + e.Message
}

// Fault is e as an invalid argument naming its field; the message names
// it too, as a client reading only the message needs it.
func (e *InputError) Fault() *fault.Error {
	return &fault.Error{Kind: fault.InvalidArgument, Field: e.Field, Message: e.Error(), Err: e}
}

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)

// IDRule says what ValidID accepts, for a refusal's message.
const IDRule = "must be 1-128 characters of letters, digits and . _ : - starting with a letter or digit"

// ValidID reports whether s is acceptable as the id of an execution, a
// session or a sandbox.
func ValidID(s string) bool { return idPattern.MatchString(s) }
