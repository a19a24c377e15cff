package validate

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxInputPath is the longest relative path CheckInputPath takes.
const MaxInputPath = 1024

// CheckInputPath validates a relative path for /workspace/input (and for
// session files): no absolute paths, no "..", no empty or dot components, no
// NUL or control characters, printable UTF-8, at most 16 levels and 1024
// bytes, 255 bytes a component. The error says what is wrong, for the
// caller; the caller names the field.
func CheckInputPath(p string) error {
	switch {
	case p == "":
		return errors.New("the path is empty")
	case len(p) > MaxInputPath:
		return fmt.Errorf("the path is longer than %d bytes", MaxInputPath)
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

const (
	// MaxPath bounds a path in a sandbox: PATH_MAX (4096) less the NUL
	// that ends it; the kernel refuses a longer one (ENAMETOOLONG).
	MaxPath = 4095
	// MaxName bounds each component of a path: NAME_MAX.
	MaxName = 255
)

// CheckAbsPath validates an absolute, clean path in a sandbox (a working
// directory, a file under /workspace or /tmp): at most MaxPath bytes and
// MaxName bytes a component, no NUL, no "..", "." or empty component and
// no trailing slash. The error says what is wrong, for the caller; the
// caller names the field.
func CheckAbsPath(p string) error {
	switch {
	case p == "":
		return errors.New("the path is empty")
	case len(p) > MaxPath:
		return fmt.Errorf("the path is %d bytes; the limit is %d (PATH_MAX)", len(p), MaxPath)
	case p[0] != '/':
		return errors.New("give an absolute path")
	case strings.IndexByte(p, 0) >= 0:
		return errors.New("the path contains a NUL byte")
	case path.Clean(p) != p:
		return errors.New("give a clean path (no .., no . or empty components, no trailing /)")
	}
	for c := range strings.SplitSeq(p[1:], "/") {
		if len(c) > MaxName {
			return fmt.Errorf("a component of the path is %d bytes; the limit is %d (NAME_MAX)", len(c), MaxName)
		}
	}
	return nil
}
