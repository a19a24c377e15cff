package snapshot_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/snapshot"
)

// BenchmarkSnapshot writes a snapshot of a 256 MiB disk image holding
// 50 MiB of data (half random, half text), restores it, changes 1 MiB and
// writes a second snapshot. It reports the speeds of the first write and
// the restore over the image's logical size, and what each snapshot
// added to the store.
func BenchmarkSnapshot(b *testing.B) {
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) { benchSnapshot(b, be.open) })
	}
}

func benchSnapshot(b *testing.B, open opener) {
	const size = 256 * MiB
	src := b.TempDir()
	img := filepath.Join(src, "disk.img")
	extents := map[int64][]byte{}
	for i := range 10 {
		var data []byte
		if i%2 == 0 {
			data = randomBytes(uint64(100+i), 5*MiB)
		} else {
			for len(data) < 5*MiB {
				data = fmt.Appendf(data, "%08d INFO worker=%d request served in %d ms\n", len(data), i, len(data)%997)
			}
			data = data[:5*MiB]
		}
		extents[int64(i)*25*MiB+MiB] = data
	}
	writeSparse(b, img, size, extents, 0o600)
	change := randomBytes(200, MiB)
	original := extents[4*25*MiB+MiB][2*MiB : 3*MiB]

	var writeT, restoreT, secondT time.Duration
	var first, second int64
	for b.Loop() {
		s := newStore(b, open(b))
		t0 := time.Now()
		m1, err := s.Write(b.Context(), "", snapshot.Meta{}, src)
		if err != nil {
			b.Fatal(err)
		}
		writeT += time.Since(t0)
		first += m1.Stats.NewBytes

		out := filepath.Join(b.TempDir(), "out")
		t0 = time.Now()
		if _, err := s.Restore(b.Context(), m1.ID, out); err != nil {
			b.Fatal(err)
		}
		restoreT += time.Since(t0)
		os.RemoveAll(out)

		f, err := os.OpenFile(img, os.O_WRONLY, 0)
		if err != nil {
			b.Fatal(err)
		}
		off := int64(4*25*MiB + 3*MiB) // inside one chunk of data
		if _, err := f.WriteAt(change, off); err != nil {
			b.Fatal(err)
		}
		t0 = time.Now()
		m2, err := s.Write(b.Context(), "", snapshot.Meta{Parent: m1.ID}, src)
		secondT += time.Since(t0)
		if err == nil {
			second += m2.Stats.NewBytes
		}
		if _, werr := f.WriteAt(original, off); werr != nil {
			b.Fatal(werr)
		}
		f.Close()
		if err != nil {
			b.Fatal(err)
		}
	}
	n := float64(b.N)
	b.ReportMetric(size/1e6/(writeT.Seconds()/n), "write-MB/s")
	b.ReportMetric(size/1e6/(restoreT.Seconds()/n), "restore-MB/s")
	b.ReportMetric(float64(first)/n, "first-bytes")
	b.ReportMetric(secondT.Seconds()/n, "second-write-s")
	b.ReportMetric(float64(second)/n, "second-bytes")
}
