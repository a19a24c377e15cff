package target

import (
	"net/http"
	"testing"

	"github.com/corralhq/corral/internal/fault"
)

// TestStatusesComplete: E2B's in-sandbox statuses (the code interpreter's
// table) answer every kind of internal/fault.
func TestStatusesComplete(t *testing.T) {
	if err := Statuses.Check(); err != nil {
		t.Fatalf("E2B's in-sandbox error table: %v", err)
	}
	if got := Statuses.Answer(ErrGone); got != http.StatusBadGateway {
		t.Errorf("a sandbox gone: %d, want 502", got)
	}
	if got := Statuses.Answer(&fault.Error{Kind: fault.ResourceExhausted, Code: "payload_too_large"}); got != http.StatusRequestEntityTooLarge {
		t.Errorf("payload_too_large: %d", got)
	}
}
