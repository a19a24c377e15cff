// Command corral-agent is the in-sandbox agent alone: the same code as
// `corral agent` (internal/agent), in a binary that links nothing else.
// Every idle pooled sandbox runs one, so what its runtime allocates at
// start (the full corral binary initialises hundreds of packages, about
// 2 MB of heap) is paid per sandbox. corral binds it as PID 1 when it sits
// next to the corral executable, and itself otherwise.
package main

import (
	"os"

	"github.com/corralhq/corral/internal/agent"
)

func main() {
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "agent" {
		args = args[1:] // as the sandbox's config starts it, for either binary
	}
	os.Exit(agent.Main(args))
}
