package target

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestWithFrom(t *testing.T) {
	if _, ok := From(context.Background()); ok {
		t.Fatal("From on a bare context reported a Target")
	}
	want := Target{Tenant: "acme", SandboxID: "i0123456789abcdef012"}
	got, ok := From(With(t.Context(), want))
	if !ok || got != want {
		t.Fatalf("From(With(%+v)) = %+v, %v", want, got, ok)
	}
}

func TestWriteError(t *testing.T) {
	rec := httptest.NewRecorder()
	WriteError(rec, http.StatusNotFound, "sandbox \"x\" not found")
	if rec.Code != http.StatusNotFound {
		t.Fatalf("status = %d, want 404", rec.Code)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type = %q", ct)
	}
	var body struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("body %q: %v", rec.Body.String(), err)
	}
	if body.Code != 404 || body.Message != "sandbox \"x\" not found" {
		t.Fatalf("body = %+v", body)
	}
}
