package main

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
)

// gcHeadroom is how much the heap of corral serve may grow between
// collections at least. Its live heap is small (about 2 MB with a warm pool
// and one-shot load), and Go's collector aims at twice the live heap, 4 MB
// at least, so it collected every six or so executions (each allocates
// about a third of a megabyte): about a tenth of the server's CPU per
// execution, the collections' own work and the threads they wake. With
// this headroom it collects every fifty or so, for about 20 MB more
// memory (resident: 34 MB before, here). Above gcHeadroom of live heap,
// GOGC's default (the heap doubles between collections) gives more room
// anyway and holds as is.
const gcHeadroom = 16 << 20

// keepGCHeadroom makes the collector let the heap grow by gcHeadroom at
// least between collections, by raising the GOGC percentage after each
// collection to what the live heap then needs; never below the default.
// An operator's GOGC (the environment variable) is left alone. It returns
// at once; the adjustment runs after each collection, from a finalizer.
func keepGCHeadroom() {
	if _, set := os.LookupEnv("GOGC"); set {
		return
	}
	t := &gcTuner{percent: 100, sample: []metrics.Sample{
		{Name: "/gc/heap/live:bytes"}, {Name: "/gc/scan/globals:bytes"}, {Name: "/gc/scan/stack:bytes"}}}
	t.arm()
}

// gcTuner sets GOGC after each collection.
type gcTuner struct {
	sample  []metrics.Sample
	percent int // what it set last
}

// arm sets the tuner to run after the next collection: it finalizes an
// object nothing references, which the next collection finds unreachable.
func (t *gcTuner) arm() {
	runtime.SetFinalizer(new(gcSentinel), func(*gcSentinel) {
		t.tune()
		t.arm()
	})
}

// gcSentinel is what arm finalizes: large enough not to share a block with
// other small objects (the allocator batches tiny ones, which may then
// never be finalized).
type gcSentinel [64]byte

// tune sets GOGC to what the live heap needs for gcHeadroom of growth. The
// collector applies the percentage to the live heap and the stacks and
// globals it scans, so those count too.
func (t *gcTuner) tune() {
	metrics.Read(t.sample)
	var base uint64
	for _, s := range t.sample {
		if s.Value.Kind() != metrics.KindUint64 {
			return
		}
		base += s.Value.Uint64()
	}
	p := gcPercent(base)
	if p != t.percent {
		debug.SetGCPercent(p)
		t.percent = p
	}
}

// gcPercent is the GOGC percentage that lets a heap whose collection
// starts from live bytes grow by gcHeadroom before the next one; 100 (the
// default) or more.
func gcPercent(live uint64) int {
	if live == 0 || live >= gcHeadroom {
		return 100
	}
	return max(100, int(gcHeadroom*100/live))
}
