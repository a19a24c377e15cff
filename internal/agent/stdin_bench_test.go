//go:build linux

package agent

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkStdin writes 1 MiB per op to a process that discards it: stdin
// throughput through the window.
func BenchmarkStdin(b *testing.B) {
	root := b.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "workspace"), 0o755); err != nil {
		b.Fatal(err)
	}
	ctx := b.Context()
	l, err := StartLocal(ctx, os.Args[0], root, io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	p, err := l.Start(ctx, persistent(StartRequest{Argv: []string{"/bin/sh", "-c", "exec cat >/dev/null"}, Dir: "/workspace", Stdin: true}), nil)
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		if _, err := p.WriteStdinContext(ctx, buf); err != nil {
			b.Fatal(err)
		}
	}
	if err := p.CloseStdin(); err != nil {
		b.Fatal(err)
	}
	if _, err := p.Wait(context.Background()); err != nil {
		b.Fatal(err)
	}
}
