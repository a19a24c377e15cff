package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/corralhq/corral/internal/mcp"
)

// cmdMCP serves Corral to AI agents over the Model Context Protocol, on
// stdio or on streamable HTTP, calling a Corral server through the SDK.
func cmdMCP(args []string) int {
	fs := flag.NewFlagSet("mcp", flag.ContinueOnError)
	remoteUsage(fs, "[flags]",
		"Serves Corral to AI agents over the Model Context Protocol (MCP). Its tools run code\n"+
			"(run_code), read executions (get_execution), list, read and write session files\n"+
			"(list_files, read_file, write_file), and run cells in live sandboxes whose variables\n"+
			"persist between calls (create_sandbox, run_cell, fork_context, close_sandbox) on the\n"+
			"server named by --endpoint / CORRAL_ENDPOINT with --api-key / CORRAL_API_KEY.\n\n"+
			"By default it speaks MCP on stdin and stdout, for a client that starts it (Claude\n"+
			"Desktop, an IDE); logs go to stderr. With --http ADDR it serves streamable HTTP at\n"+
			"http://ADDR/mcp instead and prints that URL on stderr (port 0 picks a free port).\n"+
			"A host left out of ADDR means 127.0.0.1; any other than loopback needs --http-token.\n"+
			"See docs/mcp.md.")
	var cf clientFlags
	cf.register(fs)
	httpAddr := fs.String("http", "", "serve streamable HTTP on `ADDR` (host:port) instead of stdio")
	token := fs.String("http-token", "", "require \"Authorization: Bearer `TOKEN`\" on HTTP (needed when ADDR is not loopback)")
	logLevel := fs.String("log-level", "info", "log level on stderr: debug, info, warn, error")
	if _, code, ok := parseRemote(fs, args); !ok {
		return code
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return 4
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintln(os.Stderr, "corral mcp: --log-level:", err)
		return 4
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	srv := mcp.New(cf.client(), mcp.Options{Endpoint: cf.endpoint, Logger: log})
	ctx, stop := interruptible()
	defer stop()
	if *httpAddr == "" {
		// stdout is the protocol: nothing else may write to it.
		if err := srv.ServeStdio(ctx); err != nil && ctx.Err() == nil {
			log.Error("corral mcp stopped", "err", err)
			return 1
		}
		return 0
	}
	addr, err := mcpListenAddr(*httpAddr, *token)
	if err != nil {
		fmt.Fprintln(os.Stderr, "corral mcp:", err)
		return 4
	}
	if err := serveMCPHTTP(ctx, srv, addr, *token); err != nil {
		log.Error("corral mcp stopped", "err", err)
		return 1
	}
	return 0
}

// mcpListenAddr fills in a loopback host and refuses to serve beyond
// loopback without a token: whoever reaches the port runs code with the
// API key.
func mcpListenAddr(addr, token string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("--http %q: %w", addr, err)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	ip := net.ParseIP(host)
	loopback := host == "localhost" || (ip != nil && ip.IsLoopback())
	if !loopback && token == "" {
		return "", fmt.Errorf("--http %s is reachable beyond this machine: set --http-token (or CORRAL_HTTP_TOKEN) so only your clients can run code", addr)
	}
	return net.JoinHostPort(host, port), nil
}

// serveMCPHTTP serves MCP at /mcp on addr until ctx ends.
func serveMCPHTTP(ctx context.Context, srv *mcp.Server, addr, token string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", srv.Handler(mcp.HTTPOptions{Token: token}))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	// Tests and scripts read the address from this line.
	fmt.Fprintf(os.Stderr, "corral mcp: serving MCP over streamable HTTP at http://%s/mcp\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Open event streams never go idle: after the grace period, close them.
	if err := hs.Shutdown(sctx); err != nil {
		hs.Close()
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}
