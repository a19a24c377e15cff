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
// spare's cpu-ms/op over fresh's. faults/op and zygote-faults/op count the
// page faults (minor ones, and the pages MADV_POPULATE_WRITE fills) of
// every process and of the zygote alone: on these VMs a fault is the most
// expensive work an execution does (docs/pool.md), and the counts, unlike
// CPU time, do not move with the machine's load.
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
			pid := z.cmd.Process.Pid
			ch0, z0 := childrenCPU(b), processCPU(b, pid)
			chf0, zf0 := childrenFaults(b), processFaults(b, pid)
			for b.Loop() {
				check(c.run(b, z, e))
			}
			ch, zy := childrenCPU(b)-ch0, processCPU(b, pid)-z0
			zf := processFaults(b, pid)
			zf.own -= zf0.own
			zf.children -= zf0.children
			perOp := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
			b.ReportMetric(perOp(ch+zy), "cpu-ms/op")
			b.ReportMetric(float64(childrenFaults(b)-chf0+zf.own+zf.children)/float64(b.N), "faults/op")
			b.ReportMetric(float64(zf.own)/float64(b.N), "zygote-faults/op")
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

// childrenFaults is the minor page faults of the children this process
// has reaped.
func childrenFaults(tb testing.TB) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
		tb.Fatal(err)
	}
	return ru.Minflt
}

// faults are a process's minor page faults and its reaped children's.
type faults struct{ own, children int64 }

// processFaults reads pid's minflt and cminflt from /proc/PID/stat.
func processFaults(tb testing.TB, pid int) faults {
	f := statFields(tb, pid)
	var n [2]int64
	for i, v := range f[7:9] {
		var err error
		if n[i], err = strconv.ParseInt(v, 10, 64); err != nil {
			tb.Fatal(err)
		}
	}
	return faults{own: n[0], children: n[1]}
}

// statFields is /proc/PID/stat's fields after the command's name: the
// state is the first.
func statFields(tb testing.TB, pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		tb.Fatal(err)
	}
	return strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
}

// processCPU is the CPU time of process pid and of the children it has
// reaped (/proc/PID/stat's utime, stime, cutime and cstime).
func processCPU(tb testing.TB, pid int) time.Duration {
	f := statFields(tb, pid)
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
