package mcp

import (
	"context"
	"fmt"
	"strings"

	"github.com/corralhq/corral/sandbox"
	"github.com/google/jsonschema-go/jsonschema"
	gomcp "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Snapshots and forks of whole sandboxes: a model keeps a sandbox's state
// to come back to (snapshot_sandbox, then create_sandbox with
// snapshot_id), or copies a sandbox several ways to try things side by
// side (fork_sandbox).

// SnapshotSandboxArgs are the arguments of snapshot_sandbox.
type SnapshotSandboxArgs struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the live sandbox to keep"`
	Name      string `json:"name,omitempty" jsonschema:"a name for the snapshot, usable in place of its id (1-64 letters, digits, '.', '_' or '-')"`
}

// ForkSandboxArgs are the arguments of fork_sandbox.
type ForkSandboxArgs struct {
	SandboxID      string `json:"sandbox_id" jsonschema:"the live sandbox to copy"`
	Count          int    `json:"count,omitempty" jsonschema:"how many copies (1 to 16; default 1)"`
	TimeoutSeconds int64  `json:"timeout_seconds,omitempty" jsonschema:"each copy's lifetime in seconds (default: the server's)"`
}

// Forked is the structured result of fork_sandbox.
type Forked struct {
	SandboxID string `json:"sandbox_id"`
	// Forks are the copies' ids; Errors say why a copy could not be made.
	Forks  []string `json:"forks"`
	Errors []string `json:"errors,omitempty"`
}

func (s *Server) addSnapshotTools() {
	no, yes := false, true
	addTool[SnapshotSandboxArgs, sandbox.Snapshot](s, &gomcp.Tool{
		Name:  ToolSnapshotSandbox,
		Title: "Snapshot a live sandbox",
		Description: `Keep a live sandbox's state as a snapshot: its files and, on gVisor, its memory (code contexts with their variables, running processes). The sandbox runs on.
Later, create_sandbox with snapshot_id makes a new sandbox that starts from exactly this state, as often as you like; the snapshot outlives the sandbox.`,
		Annotations: &gomcp.ToolAnnotations{Title: "Snapshot a live sandbox", DestructiveHint: &no, OpenWorldHint: &no},
	}, func(in *jsonschema.Schema) { minLen(in, "sandbox_id") }, s.snapshotSandbox)

	addTool[ForkSandboxArgs, Forked](s, &gomcp.Tool{
		Name:        ToolForkSandbox,
		Title:       "Fork a live sandbox",
		Description: `Make copies of a live sandbox, each starting from its state now (files and, on gVisor, code contexts with their variables), then going its own way: try several approaches side by side. Close the copies you no longer need.`,
		Annotations: &gomcp.ToolAnnotations{Title: "Fork a live sandbox", DestructiveHint: &no, OpenWorldHint: &yes},
	}, func(in *jsonschema.Schema) {
		minLen(in, "sandbox_id")
		c := in.Properties["count"]
		c.Minimum, c.Maximum = jsonschema.Ptr(1.0), jsonschema.Ptr(float64(sandbox.MaxForks))
		in.Properties["timeout_seconds"].ExclusiveMinimum = jsonschema.Ptr(0.0)
	}, s.forkSandbox)
}

func (s *Server) snapshotSandbox(ctx context.Context, a *SnapshotSandboxArgs) (*gomcp.CallToolResult, error) {
	sn, err := s.client.Sandbox(a.SandboxID).Snapshot(ctx, sandbox.CreateSnapshotRequest{Name: a.Name})
	if err != nil {
		return s.callFailed(ToolSnapshotSandbox, err)
	}
	kept := "its files"
	if sn.Memory {
		kept = "its files and memory (contexts with their variables, processes)"
	}
	text := fmt.Sprintf("Snapshot %s of sandbox %s keeps %s. Make a sandbox from it with create_sandbox {\"snapshot_id\": %q}.",
		sn.SnapshotID, a.SandboxID, kept, sn.SnapshotID)
	return &gomcp.CallToolResult{Content: []gomcp.Content{&gomcp.TextContent{Text: text}}, StructuredContent: sn}, nil
}

func (s *Server) forkSandbox(ctx context.Context, a *ForkSandboxArgs) (*gomcp.CallToolResult, error) {
	forks, err := s.client.Sandbox(a.SandboxID).Fork(ctx, sandbox.ForkRequest{Count: a.Count, TimeoutSeconds: a.TimeoutSeconds})
	if err != nil {
		return s.callFailed(ToolForkSandbox, err)
	}
	out := Forked{SandboxID: a.SandboxID, Forks: []string{}}
	for _, f := range forks {
		if f.Error != nil {
			out.Errors = append(out.Errors, f.Error.Code+": "+f.Error.Message)
			continue
		}
		out.Forks = append(out.Forks, f.Sandbox.SandboxID)
	}
	text := fmt.Sprintf("Forked sandbox %s into %d sandbox(es): %s. Each has its files (and on gVisor its contexts) as they were; use their ids with run_cell.",
		a.SandboxID, len(out.Forks), strings.Join(out.Forks, ", "))
	if len(out.Errors) > 0 {
		text += "\nNot made: " + strings.Join(out.Errors, "; ")
	}
	return &gomcp.CallToolResult{Content: []gomcp.Content{&gomcp.TextContent{Text: text}}, StructuredContent: out, IsError: len(out.Forks) == 0}, nil
}
