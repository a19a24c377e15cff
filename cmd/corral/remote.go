package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/corralhq/corral/sandbox"
)

// clientFlags say which server the remote commands (exec, submit, get,
// cancel, logs, ls) talk to; like every flag they also read CORRAL_<NAME>.
type clientFlags struct {
	endpoint string
	apiKey   string
}

func (f *clientFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.endpoint, "endpoint", sandbox.DefaultEndpoint, "server URL (env CORRAL_ENDPOINT)")
	fs.StringVar(&f.apiKey, "api-key", "", "API key (env CORRAL_API_KEY)")
}

// client returns an SDK client that retries what is safe to retry.
func (f *clientFlags) client() *sandbox.Client {
	return sandbox.NewClient(sandbox.Config{Endpoint: f.endpoint, APIKey: f.apiKey, MaxRetries: 3})
}

// remoteUsage sets a flag set's usage text.
func remoteUsage(fs *flag.FlagSet, synopsis, about string) {
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: corral %s %s\n\n%s\n\nflags:\n", fs.Name(), synopsis, about)
		fs.PrintDefaults()
	}
}

// parseRemote parses a remote command's flags; ok is false (with the exit
// status in code) when the command should stop.
func parseRemote(fs *flag.FlagSet, args []string) (set map[string]bool, code int, ok bool) {
	set, err := parseFlags(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return nil, 0, false
	}
	if err != nil { // parseFlags has said why
		return nil, 4, false
	}
	return set, 0, true
}

// interruptible returns a context ended by Ctrl-C or SIGTERM.
func interruptible() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// callFailed reports an error of a call to the server and returns the exit
// status: 4 when the request was refused (a 4xx: fix the request, the key or
// the id), 130 when interrupted, 70 when the server or the connection failed.
func callFailed(cmd string, err error) int {
	fmt.Fprintf(os.Stderr, "corral %s: %s\n", cmd, strings.TrimPrefix(err.Error(), "corral: "))
	var ae *sandbox.APIError
	switch {
	case errors.As(err, &ae) && ae.Status >= 400 && ae.Status < 500 && ae.Status != 429:
		return 4
	case errors.Is(err, context.Canceled):
		return 130
	default:
		return 70
	}
}

// printJSON writes v indented, for scripts.
func printJSON(w io.Writer, v any) int {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		fmt.Fprintln(os.Stderr, "corral:", err)
		return 70
	}
	return 0
}

// oneID returns the single id argument.
func oneID(fs *flag.FlagSet) (string, bool) {
	if fs.NArg() != 1 || fs.Arg(0) == "" {
		fs.Usage()
		return "", false
	}
	return fs.Arg(0), true
}

// printRecord writes a record for people: a summary, then the output.
func printRecord(w io.Writer, r *sandbox.Result) {
	line := func(k, format string, args ...any) {
		fmt.Fprintf(w, "%-10s %s\n", k, fmt.Sprintf(format, args...))
	}
	line("execution", "%s", r.ExecutionID)
	status := string(r.Status)
	if r.Error != nil {
		status += " (" + string(r.Error.Type) + ")"
		if r.Error.Retryable {
			status += ", retryable"
		}
	}
	line("status", "%s", status)
	if r.SessionID != "" {
		line("session", "%s", r.SessionID)
	}
	desc := r.Language
	if r.Tier != "" {
		desc += " · " + r.Tier
	}
	if r.Image != "" {
		desc += " · image " + r.Image
	}
	line("language", "%s", desc)
	if r.ExitCode != nil {
		exit := fmt.Sprint(*r.ExitCode)
		if r.Signal != "" {
			exit += " (" + r.Signal + ")"
		}
		line("exit code", "%s", exit)
	}
	line("duration", "%d ms (queued %d ms) · peak %d MB", r.DurationMS, r.QueueMS, r.PeakMemoryMB)
	if l := r.Limits; l != (sandbox.Limits{}) {
		line("limits", "%d ms · %d MB · %g CPU · %d MB disk", l.TimeoutMS, l.MemoryMB, l.CPUCores, l.DiskMB)
	}
	if !r.CreatedAt.IsZero() {
		line("created", "%s", r.CreatedAt.Format("2006-01-02 15:04:05.000Z07:00"))
	}
	if cb := r.Callback; cb != nil {
		state := fmt.Sprintf("%s, %d attempt(s)", cb.State, cb.Attempts)
		if cb.LastError != "" {
			state += ", last error: " + cb.LastError
		}
		line("callback", "%s → %s", state, cb.URL)
	}
	for _, a := range r.Artifacts {
		line("artifact", "%s (%d bytes) %s", a.Path, a.Size, a.URL)
	}
	if r.Error != nil && r.Error.Message != "" {
		line("error", "%s", strings.ReplaceAll(r.Error.Message, "\n", "\n           "))
	}
	for _, h := range r.LimitsHit {
		line("limit hit", "%s: %s", h.Limit, h.Detail)
	}
	section := func(name, text string, bytes, lines int64, truncated bool) {
		if bytes == 0 {
			return
		}
		note := ""
		if truncated {
			note = ", truncated to head and tail"
		}
		fmt.Fprintf(w, "--- %s (%d bytes, %d lines%s)\n", name, bytes, lines, note)
		io.WriteString(w, text)
		if !strings.HasSuffix(text, "\n") {
			fmt.Fprintln(w)
		}
	}
	section("stdout", r.Stdout, r.StdoutBytes, r.StdoutLines, r.StdoutTruncated)
	section("stderr", r.Stderr, r.StderrBytes, r.StderrLines, r.StderrTruncated)
}
