// Package pkgdoc checks that every package in the repository has exactly one
// package doc comment, saying what it owns.
package pkgdoc

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/testenv"
)

func TestEveryPackageHasOneDoc(t *testing.T) {
	root := testenv.ModuleRoot(t)
	dirs := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
			dirs[filepath.Dir(p)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", root, err)
	}
	// A walk that found nothing would pass.
	for _, want := range []string{"internal/engine", "sandbox", "cmd/corral"} {
		if !dirs[filepath.Join(root, want)] {
			t.Fatalf("the walk of %s did not find %s", root, want)
		}
	}
	for dir := range dirs {
		pkgs, err := parser.ParseDir(token.NewFileSet(), dir, func(fi os.FileInfo) bool {
			return !strings.HasSuffix(fi.Name(), "_test.go")
		}, parser.ParseComments|parser.PackageClauseOnly)
		if err != nil {
			t.Errorf("%s: %v", dir, err)
			continue
		}
		for name, pkg := range pkgs {
			var with []string
			for file, f := range pkg.Files {
				if f.Doc != nil {
					with = append(with, filepath.Base(file))
				}
			}
			rel, _ := filepath.Rel(root, dir)
			if len(with) != 1 {
				t.Errorf("package %s (%s) has %d package doc comments %v, want 1", name, rel, len(with), with)
			}
		}
	}
}
