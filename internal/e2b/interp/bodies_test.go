package interp

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/httpbody"
	"github.com/corralhq/corral/internal/kernel"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/internal/validate"
)

// TestBodies: a body cut short (five bytes of 100000, the client gone) is
// 400 or a closed connection, and data after the JSON value is 400, on
// every route that reads one.
func TestBodies(t *testing.T) {
	u := newUnit(t)
	for _, rt := range [][3]string{
		{"POST", "/execute", `{"code":"1"}`},
		{"POST", "/contexts", `{"language":"python"}`},
	} {
		res := testenv.CutShort(t, u.srv.URL, rt[0], rt[1], http.Header{"E2b-Sandbox-Id": {"box"}, "Test-Tenant": {"t"},
			"Content-Type": {"application/json"}}, "")
		if res != nil {
			errorBody(t, res, http.StatusBadRequest)
		}
		for _, tail := range []string{" x", " {}", "}"} {
			errorBody(t, u.do(rt[0], rt[1], rt[2]+tail), http.StatusBadRequest)
		}
	}
}

// badCwds are working directories refused by their bounds: PATH_MAX,
// NAME_MAX, a NUL. /v1's context test (internal/api) refuses the same
// with the same words.
var badCwds = []string{
	"/" + strings.Repeat("a", 5000),
	"/" + strings.Repeat("a", 1<<20),
	"/workspace/" + strings.Repeat("n", validate.MaxName+1),
	"/work\x00space",
}

// TestContextCwdBounds: a context whose working directory is over
// PATH_MAX (5,000 bytes, 1 MB) or NAME_MAX is refused 400, saying which
// bound, before the sandbox is asked; the sandbox lives on: a context
// made before keeps its state.
func TestContextCwdBounds(t *testing.T) {
	u := newUnit(t)
	resp := u.do("POST", "/contexts", `{"language":"python"}`)
	var c contextInfo
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil || c.ID == "" {
		t.Fatalf("a context: %s, %+v, %v", resp.Status, c, err)
	}
	u.execute(code("x = 41", `,"context_id":"`+c.ID+`"`))
	for _, cwd := range badCwds {
		b, _ := json.Marshal(cwd)
		body := `{"language":"python","cwd":` + string(b) + `}`
		msg := errorBody(t, u.do("POST", "/contexts", body), http.StatusBadRequest)
		if want := validate.CheckAbsPath(cwd).Error(); !strings.Contains(msg, want) {
			t.Errorf("cwd of %d bytes: %q does not say %q", len(cwd), msg, want)
		}
	}
	if text := mainText(u.execute(code("x + 1", `,"context_id":"`+c.ID+`"`))); text != "42" {
		t.Errorf("the context made before answered %v: the sandbox did not live on", text)
	}
	sb, err := u.m.Get("t", "box")
	if err != nil {
		t.Fatal(err)
	}
	if info := sb.Info(); info.Restarts != 0 {
		t.Errorf("the sandbox was made again %d times", info.Restarts)
	}
}

// TestBodyCapHoldsACell: a cell of the largest code, JSON-escaped, fits
// the one cap of JSON bodies, so code is refused by its own bound.
func TestBodyCapHoldsACell(t *testing.T) {
	if httpbody.MaxJSON < 2*kernel.MaxCodeSize {
		t.Errorf("httpbody.MaxJSON %d cannot hold a cell of %d bytes, escaped", httpbody.MaxJSON, kernel.MaxCodeSize)
	}
}
