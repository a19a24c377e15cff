package badinput

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// A route a service registers: an http.ServeMux pattern ("POST /files"),
// or a Connect procedure ("/process.Process/Start") and its kind.
type route struct {
	pattern string
	kind    string // http, unary, server (a server stream), client (a client stream)
}

// connectKinds are connect-go's handler constructors, by the kind of
// procedure each makes.
var connectKinds = map[string]string{
	"NewUnaryHandler":        "unary",
	"NewServerStreamHandler": "server",
	"NewClientStreamHandler": "client",
	"NewBidiStreamHandler":   "bidi",
}

// sourceRoutes reads the routes a package registers from its source
// (dir, relative to the module): every mux.Handle and mux.HandleFunc with
// a literal pattern, and every connect handler made for a procedure named
// by a literal or by a constant plus a literal. Read from the code, not a
// list kept beside it, so a route added there is swept here or fails.
func sourceRoutes(t *testing.T, root, dir string) []route {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, filepath.Join(root, dir), func(fi os.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, 0)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]route{}
	for _, pkg := range pkgs {
		for _, f := range pkg.Files {
			for _, decl := range f.Decls {
				fn, ok := decl.(*ast.FuncDecl)
				if !ok || fn.Body == nil {
					continue
				}
				consts := stringConsts(fn)
				ast.Inspect(fn.Body, func(n ast.Node) bool {
					call, ok := n.(*ast.CallExpr)
					if !ok || len(call.Args) == 0 {
						return true
					}
					sel, ok := call.Fun.(*ast.SelectorExpr)
					if !ok {
						return true
					}
					switch name := sel.Sel.Name; {
					case name == "Handle" || name == "HandleFunc":
						if p, ok := literal(call.Args[0], nil); ok {
							seen[p] = route{pattern: p, kind: "http"}
						}
					case connectKinds[name] != "":
						if x, ok := sel.X.(*ast.Ident); ok && x.Name == "connect" {
							if p, ok := literal(call.Args[0], consts); ok {
								seen[p] = route{pattern: p, kind: connectKinds[name]}
							}
						}
					}
					return true
				})
			}
		}
	}
	out := make([]route, 0, len(seen))
	for _, r := range seen {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].pattern < out[j].pattern })
	if len(out) == 0 {
		t.Fatalf("no route found in %s: has the registration changed?", dir)
	}
	return out
}

// stringConsts are the string constants fn declares.
func stringConsts(fn *ast.FuncDecl) map[string]string {
	out := map[string]string{}
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		gd, ok := n.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			return true
		}
		for _, s := range gd.Specs {
			vs := s.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if i < len(vs.Values) {
					if v, ok := literal(vs.Values[i], nil); ok {
						out[name.Name] = v
					}
				}
			}
		}
		return true
	})
	return out
}

// literal is e's value if it is a string literal, a constant of consts,
// or a sum of those.
func literal(e ast.Expr, consts map[string]string) (string, bool) {
	switch x := e.(type) {
	case *ast.BasicLit:
		if x.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(x.Value)
		return s, err == nil
	case *ast.Ident:
		s, ok := consts[x.Name]
		return s, ok
	case *ast.BinaryExpr:
		if x.Op != token.ADD {
			return "", false
		}
		a, ok1 := literal(x.X, consts)
		b, ok2 := literal(x.Y, consts)
		return a + b, ok1 && ok2
	}
	return "", false
}
