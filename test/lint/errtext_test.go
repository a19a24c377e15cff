// Package lint holds checks of the repository's source that the compiler
// and vet do not make: no decision is taken on an error's text.
package lint

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// allowMarker, followed by a reason, on the line of a finding or the line
// above it, lets it stand: for text that has no typed alternative.
const allowMarker = "//lint:allow-error-text"

// TestNoDecisionOnErrorText fails on any non-test Go file of the
// repository that decides on the text of an error: errors cross
// boundaries as values (sentinels, types, errnos, the agent's kinds), and
// their words are for people. It is a syntactic check, within one
// function: "error text" is
//
//   - err.Error(), any call of a method Error without arguments;
//   - x.Message, the message field of Corral's error types (the agent's
//     RemoteError, the API's Error, a record's Failure);
//   - the result of an exec.Cmd's CombinedOutput (a command's stderr,
//     where runtimes and tools put their errors);
//   - any of these through string(...), strings/bytes trimming and case
//     changes, .String(), slicing, a variable assigned from one, or a
//     parameter of a function of the same file that is passed one;
//
// and deciding on it is passing it to strings or bytes Contains*,
// HasPrefix, HasSuffix, Index*, LastIndex*, EqualFold, Count, Cut*, to a
// regexp's Match*, comparing it with == or != to a non-empty string
// literal, or switching on it. Tests may still read messages (assertions
// decide nothing): _test.go files are not checked.
func TestNoDecisionOnErrorText(t *testing.T) {
	root := moduleRoot(t)
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", root, err)
	}
	// A walk that found nothing would pass.
	if len(files) < 100 {
		t.Fatalf("the walk of %s found %d Go files", root, len(files))
	}
	var allowed []string
	for _, p := range files {
		findings, allows, err := checkFile(p, nil)
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		rel, _ := filepath.Rel(root, p)
		for _, f := range findings {
			t.Errorf("%s:%d: %s", rel, f.line, f.what)
		}
		for _, a := range allows {
			allowed = append(allowed, fmt.Sprintf("%s:%d: %s", rel, a.line, a.what))
		}
	}
	sort.Strings(allowed)
	for _, a := range allowed {
		t.Logf("allowed: %s", a)
	}
}

// moduleRoot is the directory of the go.mod above the test's own (the
// check reads source only: it needs no build of what it reads).
func moduleRoot(t *testing.T) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.HasPrefix(string(b), "module github.com/corralhq/corral\n") {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("not inside the corral module")
		}
		dir = parent
	}
}

// TestCheckerFindsViolations plants each kind of violation, and lookalikes
// that are not, so the check above cannot pass by finding nothing.
func TestCheckerFindsViolations(t *testing.T) {
	bad := map[string]string{
		"contains":       `if strings.Contains(err.Error(), "no such file") { return }`,
		"hasprefix":      `if strings.HasPrefix(err.Error(), "json: unknown field ") { return }`,
		"lowered":        `if strings.Contains(strings.ToLower(err.Error()), "eof") { return }`,
		"message":        `if strings.Contains(re.Message, "address already in use") { return }`,
		"nested message": `if strings.HasPrefix(res.Error.Message, "disk full") { return }`,
		"variable":       `msg := re.Message; if strings.Contains(msg, "no space left") { return }`,
		"two steps":      `msg := err.Error(); low := strings.ToLower(msg); if strings.Contains(low, "x") { return }`,
		"bytes":          `out, err := cmd.CombinedOutput(); if bytes.Contains(out, []byte("does not exist")) { return }`,
		"output string":  `out, _ := cmd.CombinedOutput(); s := string(out); if strings.Contains(s, "not found") { return }`,
		"direct output":  `b, _ := exec.Command("x").CombinedOutput(); _ = b; if strings.Contains(string(b), "x") { return }`,
		"equal":          `if err.Error() == "EOF" { return }`,
		"not equal":      `if "EOF" != err.Error() { return }`,
		"switch":         `switch err.Error() { case "EOF": return }`,
		"regexp":         `if re.MatchString(err.Error()) { return }`,
		"cut":            `if _, ok := strings.CutPrefix(err.Error(), "x"); ok { return }`,
		"index":          `if strings.Index(e.Message, "x") >= 0 { return }`,
		"func literal":   `f := func() bool { return strings.Contains(err.Error(), "x") }; _ = f`,
		"unreasoned":     "//lint:allow-error-text\nif strings.Contains(err.Error(), \"x\") { return }",
		"through a func": "out, _ := cmd.CombinedOutput(); _ = missing(out)\n}\n\nfunc missing(b []byte) bool {\ns := string(b); return strings.Contains(s, \"does not exist\")",
	}
	good := map[string]string{
		"errors.Is":         `if errors.Is(err, fs.ErrNotExist) { return }`,
		"assertion":         `if !strings.Contains(res.Stdout, "x") { return }`,
		"data output":       `out, _ := cmd.Output(); if strings.Contains(string(out), "x") { return }`,
		"empty output":      `out, _ := cmd.CombinedOutput(); if string(out) == "" { return }`,
		"message in text":   `log.Print("agent: " + re.Message)`,
		"error in fmt":      `_ = fmt.Errorf("x: %s", err.Error())`,
		"trim for display":  `_ = strings.TrimPrefix(err.Error(), "x: ")`,
		"other strings":     `if strings.HasPrefix(path, "/workspace/") { return }`,
		"allowed":           "//lint:allow-error-text encoding/json has no typed unknown-field error\nif strings.HasPrefix(err.Error(), \"json: unknown field \") { return }",
		"allowed same line": `if strings.HasPrefix(err.Error(), "x") { return } //lint:allow-error-text a reason`,
		"func, other arg":   "out, _ := cmd.CombinedOutput(); _ = g(\"x\", out)\n}\n\nfunc g(a string, b []byte) bool {\nreturn strings.Contains(a, \"y\")",
	}
	src := func(body string) string {
		return "package p\n\nfunc f() {\n" + body + "\n}\n"
	}
	for name, body := range bad {
		findings, _, err := checkFile("bad.go", []byte(src(body)))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(findings) != 1 {
			t.Errorf("%s: %d findings %v, want 1 in\n%s", name, len(findings), findings, body)
		}
	}
	for name, body := range good {
		findings, allows, err := checkFile("good.go", []byte(src(body)))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(findings) != 0 {
			t.Errorf("%s: findings %v in\n%s", name, findings, body)
		}
		if strings.HasPrefix(name, "allowed") && len(allows) != 1 {
			t.Errorf("%s: the allowed finding was not reported as allowed", name)
		}
	}
}

type finding struct {
	line int
	what string
}

// textFuncs are the strings and bytes functions that decide on text.
var textFuncs = map[string]bool{
	"Contains": true, "ContainsAny": true, "ContainsRune": true, "ContainsFunc": true,
	"HasPrefix": true, "HasSuffix": true,
	"Index": true, "IndexAny": true, "IndexByte": true, "IndexRune": true, "IndexFunc": true,
	"LastIndex": true, "LastIndexAny": true, "LastIndexByte": true, "LastIndexFunc": true,
	"EqualFold": true, "Count": true, "Cut": true, "CutPrefix": true, "CutSuffix": true,
	"Equal": true, "Compare": true,
}

// passThrough are strings and bytes functions whose result is their first
// argument's text, changed.
var passThrough = map[string]bool{
	"ToLower": true, "ToUpper": true, "TrimSpace": true, "Trim": true, "TrimLeft": true,
	"TrimRight": true, "TrimPrefix": true, "TrimSuffix": true, "Clone": true,
}

// checkFile parses path (or src, when given) and returns its findings and
// the findings an allow marker with a reason lets stand.
func checkFile(path string, src []byte) (findings, allowed []finding, err error) {
	fset := token.NewFileSet()
	var f *ast.File
	if src != nil {
		f, err = parser.ParseFile(fset, path, src, parser.ParseComments)
	} else {
		f, err = parser.ParseFile(fset, path, nil, parser.ParseComments)
	}
	if err != nil {
		return nil, nil, err
	}
	// Lines that carry an allow marker with a reason.
	allowLines := map[int]bool{}
	for _, cg := range f.Comments {
		for _, c := range cg.List {
			if reason, ok := strings.CutPrefix(c.Text, allowMarker); ok && strings.TrimSpace(reason) != "" {
				allowLines[fset.Position(c.Slash).Line] = true
			}
		}
	}
	report := func(n ast.Node, what string) {
		line := fset.Position(n.Pos()).Line
		if allowLines[line] || allowLines[line-1] {
			allowed = append(allowed, finding{line, what})
			return
		}
		findings = append(findings, finding{line, what})
	}
	// Error text passed to a function of the same file taints its
	// parameter: notExist(out) is checked inside notExist.
	funcs := map[string]*ast.FuncDecl{}
	for _, decl := range f.Decls {
		if fn, ok := decl.(*ast.FuncDecl); ok && fn.Body != nil && fn.Recv == nil {
			funcs[fn.Name.Name] = fn
		}
	}
	params := map[*ast.FuncDecl]map[string]bool{}
	passed := func(name string, arg int) bool {
		fn := funcs[name]
		if fn == nil {
			return false
		}
		i := 0
		for _, field := range fn.Type.Params.List {
			for _, id := range field.Names {
				if i == arg && id.Name != "_" && !params[fn][id.Name] {
					if params[fn] == nil {
						params[fn] = map[string]bool{}
					}
					params[fn][id.Name] = true
					return true
				}
				i++
			}
		}
		return false
	}
	ignore := func(ast.Node, string) {}
	for changed := true; changed; {
		changed = false
		for _, decl := range f.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok && fn.Body != nil {
				checkFunc(fn.Body, params[fn], ignore, func(name string, arg int) {
					changed = passed(name, arg) || changed
				})
			}
		}
	}
	for _, decl := range f.Decls {
		if fn, ok := decl.(*ast.FuncDecl); ok && fn.Body != nil {
			checkFunc(fn.Body, params[fn], report, func(string, int) {})
		}
	}
	return findings, allowed, nil
}

// checkFunc checks one function's body (function literals inside it
// included, sharing its variables), whose variables named in params hold
// error text from the start. passes is told of each call of a function by
// name with error text as its argument arg.
func checkFunc(body *ast.BlockStmt, params map[string]bool, report func(ast.Node, string), passes func(name string, arg int)) {
	tainted := map[string]bool{}
	for p := range params {
		tainted[p] = true
	}
	var isText func(e ast.Expr) bool
	isText = func(e ast.Expr) bool {
		switch e := e.(type) {
		case *ast.ParenExpr:
			return isText(e.X)
		case *ast.Ident:
			return tainted[e.Name]
		case *ast.SelectorExpr:
			return e.Sel.Name == "Message"
		case *ast.SliceExpr:
			return isText(e.X)
		case *ast.CallExpr:
			switch fun := e.Fun.(type) {
			case *ast.Ident:
				return (fun.Name == "string" || fun.Name == "[]byte") && len(e.Args) == 1 && isText(e.Args[0])
			case *ast.ArrayType:
				return len(e.Args) == 1 && isText(e.Args[0])
			case *ast.SelectorExpr:
				switch {
				case fun.Sel.Name == "Error" && len(e.Args) == 0:
					return true
				case fun.Sel.Name == "CombinedOutput" && len(e.Args) == 0:
					return true
				case fun.Sel.Name == "String" && len(e.Args) == 0:
					return isText(fun.X)
				case isPkg(fun.X, "strings", "bytes") && passThrough[fun.Sel.Name]:
					return len(e.Args) > 0 && isText(e.Args[0])
				}
			}
		}
		return false
	}
	// Taint what is assigned from error text, until nothing changes.
	for changed := true; changed; {
		changed = false
		taint := func(lhs []ast.Expr, rhs []ast.Expr) {
			for i, l := range lhs {
				id, ok := l.(*ast.Ident)
				if !ok || id.Name == "_" || tainted[id.Name] {
					continue
				}
				var from ast.Expr
				switch {
				case len(rhs) == len(lhs):
					from = rhs[i]
				case len(rhs) == 1 && i == 0:
					from = rhs[0] // out, err := cmd.CombinedOutput()
				default:
					continue
				}
				if isText(from) {
					tainted[id.Name] = true
					changed = true
				}
			}
		}
		ast.Inspect(body, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.AssignStmt:
				taint(n.Lhs, n.Rhs)
			case *ast.ValueSpec:
				lhs := make([]ast.Expr, len(n.Names))
				for i, id := range n.Names {
					lhs[i] = id
				}
				taint(lhs, n.Values)
			}
			return true
		})
	}
	ast.Inspect(body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CallExpr:
			if id, ok := n.Fun.(*ast.Ident); ok {
				for i, a := range n.Args {
					if isText(a) {
						passes(id.Name, i)
					}
				}
			}
			fun, ok := n.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			decides := isPkg(fun.X, "strings", "bytes") && textFuncs[fun.Sel.Name] ||
				strings.HasPrefix(fun.Sel.Name, "Match") && !isPkg(fun.X, "strings", "bytes")
			if !decides {
				return true
			}
			for _, a := range n.Args {
				if isText(a) {
					report(n, fmt.Sprintf("%s decides on an error's text; compare errors with errors.Is/As", exprName(fun)))
					break
				}
			}
		case *ast.BinaryExpr:
			if n.Op != token.EQL && n.Op != token.NEQ {
				return true
			}
			if isText(n.X) && nonEmptyString(n.Y) || isText(n.Y) && nonEmptyString(n.X) {
				report(n, "comparing an error's text with a string; compare errors with errors.Is/As")
			}
		case *ast.SwitchStmt:
			if n.Tag != nil && isText(n.Tag) {
				report(n, "switching on an error's text; compare errors with errors.Is/As")
			}
		}
		return true
	})
}

func isPkg(e ast.Expr, names ...string) bool {
	id, ok := e.(*ast.Ident)
	if !ok {
		return false
	}
	for _, n := range names {
		if id.Name == n {
			return true
		}
	}
	return false
}

func nonEmptyString(e ast.Expr) bool {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return false
	}
	s, err := strconv.Unquote(lit.Value)
	return err == nil && s != ""
}

func exprName(s *ast.SelectorExpr) string {
	if id, ok := s.X.(*ast.Ident); ok {
		return id.Name + "." + s.Sel.Name
	}
	return s.Sel.Name
}
