package main

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/corralhq/corral/internal/agent"
)

// cmdAgent is PID 1 inside a sandbox; the runtime starts it with the control
// stream on stdin and stdout. It is not meant to be run by hand.
func cmdAgent(args []string) int {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if err := agent.Serve(os.Stdin, os.Stdout, log); err != nil {
		fmt.Fprintf(os.Stderr, "corral agent: %v\n", err)
		return 1
	}
	return 0
}
