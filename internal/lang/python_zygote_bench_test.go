//go:build linux

package lang_test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// BenchmarkPythonZygote measures the CPU one execution of a short program
// costs through the zygote — from its spare, with the ping a reset sends
// (which makes the next spare) — against a fresh interpreter running the
// same program through the same wrapper, outside any sandbox (so without
// the agent, the runtime or the server). cpu-ms/op counts every process
// involved: the zygote (and the children it reaps) from /proc, and the
// children this process reaps as their subreaper (a fresh interpreter; a
// zygote's child where it cannot reap its own) from its rusage. The ratio the pool's CPU target rests on is
// spare's cpu-ms/op over fresh's.
func BenchmarkPythonZygote(b *testing.B) {
	needPython(b)
	z := startZygote(b)
	e := execution{code: "print(21 * 2)\n"}
	check := func(r result) {
		if r.Stdout != "42\n" || r.Exit != "exit 0" {
			b.Fatalf("the program left %+v", r)
		}
	}
	for _, c := range []struct {
		name string
		run  func(testing.TB, *zygoteProc, execution) result
	}{{"fresh", runFresh}, {"spare", runSpare}} {
		b.Run(c.name, func(b *testing.B) {
			check(c.run(b, z, e)) // caches, and the spare made by the last ping
			ch0, z0 := childrenCPU(b), processCPU(b, z.cmd.Process.Pid)
			for b.Loop() {
				check(c.run(b, z, e))
			}
			ch, zy := childrenCPU(b)-ch0, processCPU(b, z.cmd.Process.Pid)-z0
			perOp := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
			b.ReportMetric(perOp(ch+zy), "cpu-ms/op")
		})
	}
}

// childrenCPU is the CPU time of the children this process has reaped.
func childrenCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// processCPU is the CPU time of process pid and of the children it has
// reaped (/proc/PID/stat's utime, stime, cutime and cstime).
func processCPU(tb testing.TB, pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		tb.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	var ticks int64
	for _, v := range f[11:15] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			tb.Fatal(err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / 100 // USER_HZ
}
