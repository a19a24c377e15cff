package main

import (
	"github.com/corralhq/corral/internal/agent"
)

// cmdAgent is PID 1 inside a sandbox; the runtime starts it with the control
// stream on stdin and stdout. It is not meant to be run by hand (but for
// "agent local ROOT", agent.ServeLocal, for tests).
func cmdAgent(args []string) int { return agent.Main(args) }
