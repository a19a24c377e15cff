package lang

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/corralhq/corral/internal/collect"
)

// ModuleIndex knows which images provide a language's modules; the
// engine's image store is one. Runners know nothing else about images.
type ModuleIndex interface {
	// ImagesWithModule lists the images in which a program in language
	// can import the top-level module, sorted.
	ImagesWithModule(language, module string) []string
}

// ModuleReporter is a Runner that can tell, from a failed program's
// stderr, which module it could not import.
type ModuleReporter interface {
	// MissingModule returns the top-level module (Python) or package
	// (Node) the program failed to import, if that is why it failed.
	MissingModule(stderr string) (module string, ok bool)
}

// Explain returns how the verdict explains a failed run of r in image: the
// runner's Explainer (or the last line of stderr), and when the program
// could not import a module, which images have it. idx may be nil.
func Explain(r Runner, image string, idx ModuleIndex) func(stderr string) string {
	base := collect.LastLine
	if ex, ok := r.(Explainer); ok {
		base = ex.Explain
	}
	mr, ok := r.(ModuleReporter)
	if !ok || idx == nil {
		return base
	}
	return func(stderr string) string {
		msg := base(stderr)
		mod, ok := mr.MissingModule(stderr)
		if !ok {
			return msg
		}
		return msg + " " + moduleHint(mod, image, idx.ImagesWithModule(r.Name(), mod))
	}
}

func moduleHint(mod, image string, have []string) string {
	if slices.Contains(have, image) {
		// The image has the package; something inside it is missing.
		return ""
	}
	if len(have) == 0 {
		return fmt.Sprintf("(module %q is not in image %q, nor in any other image on this server)", mod, image)
	}
	return fmt.Sprintf("(module %q is not in image %q; images that have it: %s; choose one with the request's \"image\" field)",
		mod, image, strings.Join(have, ", "))
}

var (
	pyMissing   = regexp.MustCompile(`ModuleNotFoundError: No module named '([^']+)'`)
	nodeMissing = regexp.MustCompile(`Cannot find (?:module|package) '([^']+)'`)
)

// missingPython finds the last ModuleNotFoundError's module, top level only:
// "a.b" missing while "a" imports is a question for package a, not images.
func missingPython(stderr string) (string, bool) {
	m := pyMissing.FindAllStringSubmatch(stderr, -1)
	if m == nil {
		return "", false
	}
	mod, _, _ := strings.Cut(m[len(m)-1][1], ".")
	return mod, mod != ""
}

// missingNode finds the package of node's "Cannot find module 'x'"
// (CommonJS) or "Cannot find package 'x'" (ES modules): "lodash/fp" →
// "lodash", "@scope/pkg/sub" → "@scope/pkg". Relative and absolute paths,
// and node: built-ins, are the program's own business.
func missingNode(stderr string) (string, bool) {
	m := nodeMissing.FindStringSubmatch(stderr)
	if m == nil {
		return "", false
	}
	spec := m[1]
	if strings.HasPrefix(spec, ".") || strings.HasPrefix(spec, "/") || strings.HasPrefix(spec, "node:") {
		return "", false
	}
	parts := strings.SplitN(spec, "/", 3)
	if strings.HasPrefix(spec, "@") {
		if len(parts) < 2 {
			return "", false
		}
		return parts[0] + "/" + parts[1], true
	}
	return parts[0], true
}
