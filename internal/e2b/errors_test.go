package e2b

import "testing"

// TestRESTTableComplete: E2B's REST table answers every kind of
// internal/fault.
func TestRESTTableComplete(t *testing.T) {
	if missing := rest.Missing(); len(missing) > 0 {
		t.Errorf("E2B's REST error table has no row for %v", missing)
	}
}
