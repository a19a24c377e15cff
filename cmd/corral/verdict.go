package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/corralhq/corral/sandbox"
)

// exitStatus mirrors a verdict in a process exit status (docs/errors.md, the CLI exit column).
func exitStatus(r *sandbox.Result) int {
	if r.Status == sandbox.StatusSuccess {
		return 0
	}
	if r.Error == nil {
		return 70
	}
	switch r.Error.Type {
	case sandbox.ErrRuntime:
		return 1
	case sandbox.ErrCompile:
		return 2
	case sandbox.ErrResourceLimit:
		return 3
	case sandbox.ErrInput:
		return 4
	case sandbox.ErrTimeout:
		return 124
	case sandbox.ErrCancelled:
		return 130
	case sandbox.ErrOOM:
		return 137
	default:
		return 70
	}
}

// printVerdict writes the one-line summary that follows a program's output.
func printVerdict(w io.Writer, r *sandbox.Result) {
	var b strings.Builder
	b.WriteString("corral: ")
	if r.Status == sandbox.StatusSuccess {
		b.WriteString("success")
	} else if r.Error != nil {
		b.WriteString(string(r.Error.Type))
	} else {
		b.WriteString(string(r.Status))
	}
	if r.ExitCode != nil {
		fmt.Fprintf(&b, " · exit %d", *r.ExitCode)
	}
	fmt.Fprintf(&b, " · %d ms · peak %d MB · %s", r.DurationMS, r.PeakMemoryMB, r.Tier)
	if r.StdoutTruncated || r.StderrTruncated {
		fmt.Fprintf(&b, " · output %d+%d bytes, truncated", r.StdoutBytes, r.StderrBytes)
	}
	if len(r.LimitsHit) > 0 {
		// On the verdict line: a success that met a limit must not read as
		// a plain "success · exit 0".
		names := make([]string, len(r.LimitsHit))
		for i, h := range r.LimitsHit {
			names[i] = string(h.Limit)
		}
		fmt.Fprintf(&b, " · limits hit: %s", strings.Join(names, ", "))
	}
	if r.Error != nil && r.Error.Message != "" {
		b.WriteString("\n        ")
		b.WriteString(strings.ReplaceAll(r.Error.Message, "\n", "\n        "))
	}
	for _, h := range r.LimitsHit {
		fmt.Fprintf(&b, "\n        %s: %s", h.Limit, h.Detail)
	}
	fmt.Fprintln(w, b.String())
}
