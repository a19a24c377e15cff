package engine_test

import (
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/engine"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
)

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// TestInputs: inputs given inline and by URL are under /workspace/input
// before the program runs.
func TestInputs(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/data.csv" {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte("a,b\n1,2\n"))
	}))
	t.Cleanup(srv.Close)
	f := testenv.FakeEngine(t, func(c *engine.Config) { c.Files.Client = srv.Client() })
	job, err := f.Prepare(sandbox.ExecuteRequest{Language: "bash", Code: "cat input/notes/a.txt input/data.csv",
		Files: []sandbox.File{{Path: "notes/a.txt", ContentBase64: b64("hello\n")}, {Path: "data.csv", URL: srv.URL + "/data.csv"}}})
	if err != nil {
		t.Fatal(err)
	}
	if res := f.Run(t.Context(), job, nil); res.Status != sandbox.StatusSuccess || res.Stdout != "hello\na,b\n1,2\n" {
		t.Errorf("%s %+v, stdout %q", res.Status, res.Error, res.Stdout)
	}
}

// TestBadInputs: an input that cannot be used fails the execution as
// input_error, naming it, and nothing runs.
func TestBadInputs(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	f := testenv.FakeEngine(t, func(c *engine.Config) {
		c.Files.Client = srv.Client()
		c.Files.MaxFiles, c.Files.MaxFileBytes = 3, 8
	})
	cases := []struct {
		name  string
		files []sandbox.File
		in    string // in the message
	}{
		{"escapes", []sandbox.File{{Path: "../x", ContentBase64: b64("x")}}, "../x"},
		{"twice", []sandbox.File{{Path: "a", ContentBase64: b64("x")}, {Path: "a", ContentBase64: b64("y")}}, "given twice"},
		{"neither", []sandbox.File{{Path: "a"}}, "exactly one of url and content_base64"},
		{"both", []sandbox.File{{Path: "a", ContentBase64: b64("x"), URL: srv.URL}}, "exactly one of url and content_base64"},
		{"not base64", []sandbox.File{{Path: "a", ContentBase64: "!!"}}, `"a"`},
		{"too large", []sandbox.File{{Path: "a", ContentBase64: b64(strings.Repeat("x", 9))}}, `"a"`},
		{"too many", []sandbox.File{{Path: "a", ContentBase64: b64("x")}, {Path: "b", ContentBase64: b64("x")},
			{Path: "c", ContentBase64: b64("x")}, {Path: "d", ContentBase64: b64("x")}}, "at most 3"},
		{"not found", []sandbox.File{{Path: "a", URL: srv.URL + "/missing"}}, `"a"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			job, err := f.Prepare(sandbox.ExecuteRequest{Language: "bash", Code: "echo ran", Files: c.files})
			if err != nil {
				t.Fatal(err)
			}
			res := f.Run(t.Context(), job, nil)
			if res.Error == nil || res.Error.Type != sandbox.ErrInput || !strings.Contains(res.Error.Message, c.in) || res.Stdout != "" {
				t.Errorf("%s %+v, stdout %q; want input_error naming %s", res.Status, res.Error, res.Stdout, c.in)
			}
		})
	}
}
