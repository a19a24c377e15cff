package e2b

import (
	"net/http"
	"testing"

	"github.com/corralhq/corral/internal/e2b/target"
	"github.com/corralhq/corral/internal/fault"
)

// TestRESTTable: E2B's REST table answers every kind of internal/fault;
// a sandbox lost with its node is 410 there, 502 in the in-sandbox
// services (the table it starts from).
func TestRESTTable(t *testing.T) {
	if err := rest.Check(); err != nil {
		t.Fatalf("E2B's REST error table: %v", err)
	}
	gone := &fault.Error{Kind: fault.Gone, Code: "sandbox_lost"}
	if rest.Answer(gone) != http.StatusGone || target.Statuses.Answer(gone) != http.StatusBadGateway {
		t.Errorf("gone: REST %d, in-sandbox %d", rest.Answer(gone), target.Statuses.Answer(gone))
	}
}
