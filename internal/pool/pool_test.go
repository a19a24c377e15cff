package pool_test

import (
	"testing"

	"github.com/corralhq/corral/internal/testenv"
)

// TestMain serves as the agent of the fake sandboxes the unit tests use
// (testenv.FakeEngine); pool_sandbox_test.go runs real ones as root.
func TestMain(m *testing.M) {
	testenv.AgentMain()
	testenv.Main(m)
}
