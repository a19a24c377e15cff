// Command corral-agent is the in-sandbox agent alone: the same code as
// `corral agent` (internal/agent), in a binary that links nothing else.
// Every idle pooled sandbox runs one, so what its runtime allocates at
// start (the full corral binary initialises hundreds of packages, about
// 2 MB of heap) is paid per sandbox. corral binds it as PID 1 when it sits
// next to the corral executable, and itself otherwise.
package main

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/corralhq/corral/internal/agent"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] != "agent" {
		fmt.Fprintln(os.Stderr, "corral-agent is started by corral inside a sandbox, not by hand")
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if err := agent.Serve(os.Stdin, os.Stdout, log); err != nil {
		fmt.Fprintf(os.Stderr, "corral agent: %v\n", err)
		os.Exit(1)
	}
}
