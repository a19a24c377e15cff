//go:build linux

package lang_test

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/corralhq/corral/internal/lang"
)

// TestPythonContextParts checks the context runner's functions that need
// no process of their own (the runner loaded as a module; its entry point
// runs only as __main__). The runner as a whole is tested through
// internal/kernel.
func TestPythonContextParts(t *testing.T) {
	needPython(t)
	r, _ := lang.Get("python")
	src := r.(lang.Contexter).ContextStep().Argv[2]
	// events collects what an EventStream sends, with emit replaced.
	const events = `(lambda: (globals().__setitem__('sent', []),
	   globals().__setitem__('emit', lambda state, ev: sent.append(ev)), sent)[-1])()`
	for _, c := range []struct{ expr, want string }{
		{`[ends_with_semicolon(c, ast.parse(c).body[-1]) for c in ('x', 'x;', 'x ; # c', 'f(";")', 'é;', 'x # ;')]`,
			`[false, true, true, false, true, false]`},
		{`[mime_text('image/png', b'\x89P'), mime_text('text/html', b'<b>'), mime_text('application/json', {'a': [1]}), mime_text('text/plain', 3)]`,
			`["iVA=", "<b>", "{\"a\": [1]}", "3"]`},
		{`mime_bundle(type('R', (), {'_repr_html_': lambda s: '<b>', '_repr_latex_': lambda s: None, '__repr__': lambda s: 'R()'})())`,
			`{"text/html": "<b>", "text/plain": "R()"}`},
		{`mime_bundle(type('M', (), {'__getattr__': lambda s, n: (lambda *a, **k: 'x'), '__repr__': lambda s: 'M()'})())`,
			`{"text/plain": "M()"}`},
		{`mime_bundle(type('B', (), {'_repr_mimebundle_': lambda s, include, exclude: ({'text/plain': 'b', 'image/png': b'\x00'}, {})})())`,
			`{"text/plain": "b", "image/png": "AA=="}`},
		{`[image_format(b'\x89PNG\r\n\x1a\n', None), image_format(b'\xff\xd8\xff', None), image_format(None, 'a.JPG')]`,
			`["png", "jpeg", "jpg"]`},
		{`(` + events + `, (s := EventStream(None, 'stdout', 1)), [s.write(x) for x in ('a', 'b\nc', '\n', 'd')], sent)[-1]`,
			`[{"type": "stdout", "text": "ab\n"}, {"type": "stdout", "text": "c\n"}]`},
		{`(` + events + `, (s := EventStream(None, 'stderr', 2)), s.write('x' * 70000 + 'y'), s.write('z'), s.flush(), [len(e['text']) for e in sent])[-1]`,
			`[70001, 1]`},
		{`error_event(ZeroDivisionError('division by zero'))`,
			`{"type": "error", "name": "ZeroDivisionError", "value": "division by zero", "traceback": ["ZeroDivisionError: division by zero\n"]}`},
	} {
		got := evalZygote(t, src, c.expr)
		var g, w any
		if err := json.Unmarshal(got, &g); err != nil {
			t.Fatalf("%s: %s: %v", c.expr, got, err)
		}
		if err := json.Unmarshal([]byte(c.want), &w); err != nil {
			t.Fatalf("%s: want %s: %v", c.expr, c.want, err)
		}
		if d := cmp.Diff(w, g); d != "" {
			t.Errorf("%s (-want +got):\n%s", c.expr, d)
		}
	}
}
