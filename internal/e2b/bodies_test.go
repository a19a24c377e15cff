package e2b

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"testing"

	"github.com/corralhq/corral/internal/testenv"
)

// restBodyRoutes are the REST routes that read a JSON body, for sandbox
// id, with a good body each.
func restBodyRoutes(id string) [][3]string {
	return [][3]string{
		{"POST", "/sandboxes", `{"templateID":"base"}`},
		{"POST", "/v2/sandboxes", `{"templateID":"base"}`},
		{"POST", "/sandboxes/" + id + "/timeout", `{"timeout":60}`},
		{"POST", "/sandboxes/" + id + "/connect", `{"timeout":60}`},
		{"POST", "/v2/sandboxes/" + id + "/connect", `{"timeout":60}`},
		{"POST", "/sandboxes/" + id + "/resume", `{"timeout":60}`},
	}
}

// TestRESTBodies: on every REST route that reads a body, a body cut short
// (five bytes of 100000, the client gone) is 400 or a closed connection,
// data after the JSON value is 400, and a timeout beyond int64's
// seconds-in-a-Duration is refused as -1 is, never wrapped to the
// default.
func TestRESTBodies(t *testing.T) {
	u := newUnit(t, "")
	c := u.create(keyA, `{"templateID":"base"}`)
	for _, rt := range restBodyRoutes(c.SandboxID) {
		what := rt[0] + " " + rt[1]
		res := testenv.CutShort(t, u.url, rt[0], rt[1], http.Header{"X-Api-Key": {keyA}, "Content-Type": {"application/json"}}, "")
		if res != nil {
			b, _ := io.ReadAll(res.Body)
			e2bError(t, what+" cut short", res.StatusCode, b, http.StatusBadRequest)
		}
		for _, tail := range []string{" x", " {}", "}"} {
			code, b, _ := u.do(rt[0], rt[1], rt[2]+tail, "X-API-Key", keyA)
			e2bError(t, what+" "+tail, code, b, http.StatusBadRequest)
		}
		for _, n := range []int64{-1, math.MinInt64, math.MaxInt64} {
			body := fmt.Sprintf(`{"templateID":"base","timeout":%d}`, n)
			code, b, _ := u.do(rt[0], rt[1], body, "X-API-Key", keyA)
			e2bError(t, fmt.Sprintf("%s timeout %d", what, n), code, b, http.StatusBadRequest)
		}
	}
	// The sandbox serves on, with the timeout it had.
	var d detail
	u.call(keyA, "GET", "/sandboxes/"+c.SandboxID, "", http.StatusOK, &d)
	if d.State != "running" {
		t.Errorf("after the refusals: %+v", d)
	}
}
