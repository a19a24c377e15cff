package interp

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/e2b/target"
	"github.com/corralhq/corral/internal/live"
	"github.com/corralhq/corral/internal/workspace"
)

// alone is a cluster of one node for a table with no sandbox in it.
type alone struct{}

func (alone) Own(_ context.Context, _, _ string) (bool, error) { return true, nil }
func (alone) Disown(_ context.Context, _, _ string) error      { return nil }

// FuzzBody: any body of POST /execute or POST /contexts is refused with
// E2B's 4xx error or, once read, reaches the sandbox (which is not there:
// 502), never a panic or another 5xx.
func FuzzBody(f *testing.F) {
	for _, s := range []string{`{"code":"print(1)","language":"python"}`, `{"code":"1","context_id":"c1"}`,
		`{"language":"js","cwd":"/workspace"}`, `{}`, ``, `{"code":"x","context_id":"c","language":"python"}`,
		`{"code":"x","env_vars":{"A":"1"}}`, `{"language":"cobol"}`} {
		f.Add([]byte(s))
	}
	// The 1 MB cases are made here rather than kept in testdata/fuzz/FuzzBody
	// with the other hostile ones.
	f.Add([]byte(`{"cwd":"` + strings.Repeat("a", 1<<20) + `"}`))
	f.Add([]byte(`{"code":"` + strings.Repeat("x", 1<<20+1) + `"}`))
	log := slog.New(slog.DiscardHandler)
	table, err := workspace.Open(f.Context(), workspace.Config{Dir: f.TempDir(), ReapInterval: time.Hour}, alone{}, log)
	if err != nil {
		f.Fatal(err)
	}
	h := New(live.New(live.DefaultConfig(), live.Deps{Table: table, Log: log}), log)
	ctx := target.With(f.Context(), target.Target{Tenant: "t", SandboxID: "absent"})
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, p := range []string{"/execute", "/contexts"} {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequestWithContext(ctx, "POST", p, bytes.NewReader(body)))
			var e struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			}
			if json.Unmarshal(w.Body.Bytes(), &e) != nil || e.Code != w.Code || e.Message == "" {
				t.Fatalf("%s %q: %d %q, not E2B's error", p, body, w.Code, w.Body)
			}
			if w.Code == http.StatusBadGateway {
				if len(bytes.TrimSpace(body)) != 0 && !json.Valid(body) {
					t.Fatalf("%s: %q is not one JSON value, and is accepted", p, body)
				}
				continue
			}
			if w.Code < 400 || w.Code > 499 {
				t.Fatalf("%s %q: %d %s", p, body, w.Code, w.Body)
			}
		}
	})
}
