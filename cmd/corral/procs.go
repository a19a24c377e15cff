package main

import (
	"os"
	"runtime"
)

// serveProcsShare is the share of the machine's CPUs that corral serve
// runs Go code on at once (GOMAXPROCS): one in four, one at least. The
// server's own work per execution (HTTP, the store, the agent's protocol)
// is about a sixth of an execution's CPU, and the rest of the machine is
// its sandboxes'. With a P for every CPU, each hand-off between the
// server's goroutines (the request, the dispatcher, the agent's reader)
// woke an idle P's thread, which spun looking for work and went back to
// sleep: on the 2-CPU VMs Corral is measured on, where a system call and
// an interrupt cost several microseconds, that was about a third of the
// server's CPU per warm execution (6.1-6.5 ms with 2 Ps, 3.5-4.1 ms with 1,
// at the same exec/s; docs/bench.md, "Where a warm execution's CPU goes").
const serveProcsShare = 4

// limitProcs sets GOMAXPROCS for corral serve to serveProcs of the CPUs Go
// found (the machine's, or its cgroup's limit). An operator's GOMAXPROCS
// (the environment variable) is left alone. Called once: it reads the
// GOMAXPROCS it sets.
func limitProcs() {
	if _, set := os.LookupEnv("GOMAXPROCS"); set {
		return
	}
	runtime.GOMAXPROCS(serveProcs(runtime.GOMAXPROCS(0)))
}

// serveProcs is GOMAXPROCS for corral serve on cpus CPUs.
func serveProcs(cpus int) int {
	return max(1, cpus/serveProcsShare)
}
