package agent

import (
	"io"
	"testing"
)

// ZygoteMsg is zygoteMsg, for agent_test's tests, which run tools (the
// python zygotes through internal/testenv) that import this package.
type ZygoteMsg = zygoteMsg

// DiagLog is testWriter, for agent_test's tests: an agent's diagnostics
// logged with the test's.
func DiagLog(t *testing.T) io.Writer { return testWriter{t} }
