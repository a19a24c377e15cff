package main

import (
	"os"
	"runtime"
	"testing"
)

func TestServeProcs(t *testing.T) {
	for _, c := range []struct{ cpus, want int }{
		{1, 1}, {2, 1}, {4, 1}, {7, 1}, {8, 2}, {64, 16},
	} {
		if got := serveProcs(c.cpus); got != c.want {
			t.Errorf("serveProcs(%d) = %d, want %d", c.cpus, got, c.want)
		}
	}
}

// TestLimitProcs: an operator's GOMAXPROCS is left as it is; without one,
// GOMAXPROCS becomes serveProcs of the CPUs.
func TestLimitProcs(t *testing.T) {
	was := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(was) })
	t.Setenv("GOMAXPROCS", "3")
	runtime.GOMAXPROCS(3)
	limitProcs()
	if got := runtime.GOMAXPROCS(0); got != 3 {
		t.Errorf("GOMAXPROCS %d with GOMAXPROCS=3 in the environment, want 3", got)
	}
	os.Unsetenv("GOMAXPROCS") // restored by t.Setenv's cleanup
	runtime.GOMAXPROCS(8)
	limitProcs()
	if got := runtime.GOMAXPROCS(0); got != 2 {
		t.Errorf("GOMAXPROCS %d after limitProcs on 8, want 2", got)
	}
}
