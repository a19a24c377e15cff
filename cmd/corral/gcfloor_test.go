package main

import (
	"os"
	"runtime"
	"runtime/metrics"
	"testing"
	"time"
)

func TestGCPercent(t *testing.T) {
	for _, c := range []struct {
		live uint64
		want int
	}{
		{0, 100},
		{2 << 20, 800}, // 2 MB live: room for 16 MB more
		{gcHeadroom / 4, 400},
		{gcHeadroom / 2, 200},
		{gcHeadroom * 3 / 4, 133},
		{gcHeadroom - 1, 100}, // the default gives as much
		{gcHeadroom, 100},
		{10 * gcHeadroom, 100}, // a large heap keeps the default
	} {
		if got := gcPercent(c.live); got != c.want {
			t.Errorf("gcPercent(%d) = %d, want %d", c.live, got, c.want)
		}
	}
}

// gogc reads the GOGC percentage in force.
func gogc() int64 {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// TestKeepGCHeadroom: with GOGC unset, after a collection of this test's
// small heap GOGC is raised so that the heap may grow by gcHeadroom; with
// GOGC set, it is left alone.
func TestKeepGCHeadroom(t *testing.T) {
	t.Setenv("GOGC", "100")
	keepGCHeadroom()
	runtime.GC()
	runtime.GC()
	time.Sleep(50 * time.Millisecond)
	if p := gogc(); p != 100 {
		t.Errorf("GOGC %d with GOGC set in the environment, want 100 as it was", p)
	}
	os.Unsetenv("GOGC") // restored by t.Setenv's cleanup
	keepGCHeadroom()
	deadline := time.Now().Add(10 * time.Second)
	for gogc() <= 100 {
		if time.Now().After(deadline) {
			t.Fatalf("GOGC still %d after collections of a small heap", gogc())
		}
		runtime.GC() // runs the finalizer armed before it, which arms the next
		time.Sleep(10 * time.Millisecond)
	}
}
