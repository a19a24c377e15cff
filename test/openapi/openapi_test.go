package openapi

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/testenv"
	"github.com/getkin/kin-openapi/openapi3"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestSpecCoversEveryRoute: each route internal/api registers is in the
// spec, so a new endpoint cannot ship undocumented.
func TestSpecCoversEveryRoute(t *testing.T) {
	doc := loadSpec(t)
	src, err := os.ReadFile(filepath.Join(testenv.ModuleRoot(t), "internal", "api", "server.go"))
	if err != nil {
		t.Fatal(err)
	}
	routes := regexp.MustCompile(`route\("([A-Z]+) (/[^"]*)"`).FindAllStringSubmatch(string(src), -1)
	if len(routes) < 8 {
		t.Fatalf("found only %d routes in server.go; has the registration changed?", len(routes))
	}
	for _, r := range routes {
		method, path := r[1], strings.ReplaceAll(r[2], "...}", "}")
		item := doc.Paths.Find(path)
		if item == nil || item.GetOperation(method) == nil {
			t.Errorf("%s %s is served but not in api/openapi.yaml", method, path)
		}
	}
}

func loadSpec(t *testing.T) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile(filepath.Join(testenv.ModuleRoot(t), "api", "openapi.yaml"))
	if err != nil {
		t.Fatalf("load spec: %v", err)
	}
	if !doc.IsOpenAPI31OrLater() {
		t.Fatalf("spec is OpenAPI %s, want 3.1", doc.OpenAPI)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("spec is invalid: %v", err)
	}
	return doc
}
