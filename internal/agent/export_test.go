package agent

// ZygoteMsg is zygoteMsg, for agent_test's tests, which run tools (the
// python zygotes through internal/testenv) that import this package.
type ZygoteMsg = zygoteMsg
