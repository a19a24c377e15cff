// Package mcp serves Corral to AI agents over the Model Context Protocol:
// tools that run code, read executions, move files in and out of a
// session's workspace, and run cells in the code contexts of live
// sandboxes, whose variables persist between calls (live.go), each
// answered by a Corral server through the Go SDK (package sandbox). It owns the tool names, descriptions and schemas, the
// mapping of SDK errors to tool errors and protocol errors, and the stdio and
// streamable HTTP transports.
package mcp

import (
	"context"
	"crypto/subtle"
	"log/slog"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/corralhq/corral/sandbox"
	gomcp "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Options tune a Server.
type Options struct {
	// Endpoint is the Corral server's URL, named in errors when it cannot
	// be reached.
	Endpoint string
	// Version is reported to clients; empty: the binary's module version.
	Version string
	// Logger receives one line per tool call and the failures no client
	// sees; nil discards them.
	Logger *slog.Logger
}

// Server is an MCP server whose tools call one Corral server. It is safe
// for concurrent use: any number of MCP sessions may share it.
type Server struct {
	client   *sandbox.Client
	endpoint string
	log      *slog.Logger
	mcp      *gomcp.Server
}

// instructions tell a model how the tools fit together.
const instructions = `Corral runs code in isolated sandboxes (no network unless asked for, bounded time and memory).
Call run_code with a language and the code; read the text summary: on failure it names the error type, shows the failing line and says what to do next.
To keep files between calls, pass the same session_id: every run of a session shares its /workspace, and list_files, read_file and write_file reach the same files.
Programs start in /workspace. Files written under /workspace/output are returned as artifacts with download links.
For work that builds on earlier steps (load data once, then explore it), use run_cell instead: it runs code in a live sandbox's code context, where variables, imports and functions persist between calls, like a notebook. The first run_cell without sandbox_id creates the sandbox and a context and returns their ids; pass both on later calls. fork_context copies a context's state to try something without losing it; close_sandbox ends a sandbox (or one context) when you are done.`

// New returns a Server whose tools call Corral through client.
func New(client *sandbox.Client, opts Options) *Server {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	version := opts.Version
	if version == "" {
		version = "(devel)"
		if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
			version = bi.Main.Version
		}
	}
	s := &Server{client: client, endpoint: opts.Endpoint, log: log}
	s.mcp = gomcp.NewServer(&gomcp.Implementation{Name: "corral", Title: "Corral code sandbox", Version: version},
		&gomcp.ServerOptions{Instructions: instructions})
	s.addTools()
	return s
}

// MCP returns the underlying MCP server, to connect it to any transport.
func (s *Server) MCP() *gomcp.Server { return s.mcp }

// ServeStdio serves one MCP session on the process's stdin and stdout until
// the client closes it or ctx ends.
func (s *Server) ServeStdio(ctx context.Context) error {
	return s.mcp.Run(ctx, &gomcp.StdioTransport{})
}

// HTTPOptions tune Handler.
type HTTPOptions struct {
	// Token, when set, must come as "Authorization: Bearer <token>" on
	// every request.
	Token string
	// SessionTimeout closes MCP sessions idle this long; zero: 30 minutes.
	SessionTimeout time.Duration
}

// Handler serves MCP over streamable HTTP, at whatever path it is mounted
// on. Requests that reach a loopback address with a Host header that is not
// loopback are refused (DNS rebinding), as are cross-origin browser
// requests.
func (s *Server) Handler(opts HTTPOptions) http.Handler {
	timeout := opts.SessionTimeout
	if timeout == 0 {
		timeout = 30 * time.Minute
	}
	h := gomcp.NewStreamableHTTPHandler(func(*http.Request) *gomcp.Server { return s.mcp },
		&gomcp.StreamableHTTPOptions{SessionTimeout: timeout, Logger: s.log})
	protected := http.NewCrossOriginProtection().Handler(h)
	if opts.Token == "" {
		return protected
	}
	want := []byte("Bearer " + opts.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="corral mcp"`)
			http.Error(w, "missing or wrong bearer token", http.StatusUnauthorized)
			return
		}
		protected.ServeHTTP(w, r)
	})
}
