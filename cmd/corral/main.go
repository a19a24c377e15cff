// Command corral runs untrusted code in isolated, limited sandboxes: as a
// server (corral serve), locally (corral run), or as a client of a server.
package main

import (
	"fmt"
	"os"
)

type command struct {
	name    string
	summary string
	run     func(args []string) int
}

var commands []command

func init() {
	commands = []command{
		{"serve", "serve the HTTP API and run executions", cmdServe},
		{"run", "run one program locally in a sandbox, no server needed", cmdRun},
		{"exec", "run code on a server and wait for the result", cmdExec},
		{"submit", "queue code on a server; print the execution id", cmdSubmit},
		{"get", "print an execution's record (--wait: until it ends)", cmdGet},
		{"cancel", "cancel executions", cmdCancel},
		{"logs", "follow an execution's output as it runs", cmdLogs},
		{"ls", "list and query executions", cmdLs},
		{"sandbox", "live sandboxes: create, list, exec, files, kill", cmdSandbox},
		{"mcp", "serve a server's sandboxes to AI agents over MCP (stdio or HTTP)", cmdMCP},
		{"image", "build, import, list and remove images", cmdImage},
		{"doctor", "check that this machine can run sandboxes", cmdDoctor},
		{"config", "check a serve configuration without serving (config check)", cmdConfig},
		{"key", "mint an API key and its configuration line (key new)", cmdKey},
		{"audit", "list the audit trail; audit verify checks its hash chains", cmdAudit},
		{"agent", "the in-sandbox agent (started by the runtime, not by hand)", cmdAgent},
	}
}

func usage() {
	fmt.Fprintf(os.Stderr, "usage: corral <command> [flags]\n\ncommands:\n")
	for _, c := range commands {
		if c.name == "agent" {
			continue
		}
		fmt.Fprintf(os.Stderr, "  %-8s %s\n", c.name, c.summary)
	}
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	name := os.Args[1]
	for _, c := range commands {
		if c.name == name {
			os.Exit(c.run(os.Args[2:]))
		}
	}
	if name == "-h" || name == "--help" || name == "help" {
		usage()
		os.Exit(0)
	}
	fmt.Fprintf(os.Stderr, "corral: unknown command %q\n", name)
	usage()
	os.Exit(2)
}
