//go:build linux

package agent

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkSmallFile places a 1 KiB file three directories deep (the way
// an execution's code file goes into /tmp/.corral), reads it back and
// removes its directory: each call's walk of the path, one component at a
// time, against the round trip it rides on.
func BenchmarkSmallFile(b *testing.B) {
	root := b.TempDir()
	for _, d := range []string{"workspace", "tmp"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			b.Fatal(err)
		}
	}
	ctx := b.Context()
	l, err := StartLocal(ctx, os.Args[0], root, io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	data := bytes.Repeat([]byte("x"), 1<<10)
	for b.Loop() {
		if err := l.WriteFile(ctx, "/tmp/.corral/run/a/main.py", 0o644, bytes.NewReader(data)); err != nil {
			b.Fatal(err)
		}
		if err := l.ReadFile(ctx, "/tmp/.corral/run/a/main.py", io.Discard); err != nil {
			b.Fatal(err)
		}
		if err := l.Remove(ctx, "/tmp/.corral"); err != nil {
			b.Fatal(err)
		}
	}
}
