package validate

import (
	"errors"
	"strings"
	"unicode"
	"unicode/utf8"
)

// CheckInputPath validates a relative path for /workspace/input (and for
// session files): no absolute paths, no "..", no empty or dot components, no
// NUL or control characters, printable UTF-8, at most 16 levels and 1024
// bytes, 255 bytes a component. The error says what is wrong, for the
// caller; the caller names the field.
func CheckInputPath(p string) error {
	switch {
	case p == "":
		return errors.New("the path is empty")
	case len(p) > 1024:
		return errors.New("the path is longer than 1024 bytes")
	case !utf8.ValidString(p):
		return errors.New("the path is not valid UTF-8")
	case strings.HasPrefix(p, "/"):
		return errors.New("the path is absolute; give it relative to the directory")
	case strings.Contains(p, "\\"):
		return errors.New("the path contains a backslash")
	}
	for _, r := range p {
		if unicode.IsControl(r) {
			return errors.New("the path contains a control character")
		}
	}
	parts := strings.Split(p, "/")
	if len(parts) > 16 {
		return errors.New("the path is deeper than 16 levels")
	}
	for _, c := range parts {
		switch {
		case c == "" || c == ".":
			return errors.New("the path has an empty or '.' component")
		case c == "..":
			return errors.New("the path leaves its directory (..)")
		case len(c) > 255:
			return errors.New("a path component is longer than 255 bytes")
		}
	}
	return nil
}
