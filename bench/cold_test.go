package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.Cleanup()
	os.Exit(code)
}

const helloPy = "print(sum(range(100)))"

// BenchmarkColdStart measures, interleaved in one run, a cold `corral run`
// of python hello against its two baselines: a bare /usr/bin/python3 spawn
// and `runc run` of an equivalent hand-made bundle. Each iteration runs all
// three, so machine noise hits them alike.
func BenchmarkColdStart(b *testing.B) {
	testenv.RequireRoot(b)
	corral := testenv.Corral(b)
	runc := testenv.Runtime(b, "runc")
	data := b.TempDir()
	state := b.TempDir()
	bundle, err := handBundle(b.TempDir(), []string{"/usr/bin/python3", "-c", helloPy}, "")
	if err != nil {
		b.Fatal(err)
	}

	bare := &series{name: "bare /usr/bin/python3 -c"}
	hand := &series{name: "runc run (hand-made bundle)"}
	cold := &series{name: "corral run (cold, CLI)"}
	steps := []struct {
		s   *series
		cmd func(i int) *exec.Cmd
	}{
		{bare, func(int) *exec.Cmd { return exec.Command("/usr/bin/python3", "-c", helloPy) }},
		{hand, func(i int) *exec.Cmd {
			return exec.Command(runc, "--root", state, "run", "--bundle", bundle, fmt.Sprintf("bench-%d", i))
		}},
		{cold, func(int) *exec.Cmd {
			cmd := exec.Command(corral, "run", "--lang", "python", "-")
			cmd.Stdin = strings.NewReader(helloPy)
			cmd.Env = append(os.Environ(), "CORRAL_DATA_DIR="+data, "CORRAL_CGROUP_PARENT="+testenv.CgroupParent,
				"CORRAL_CACHE_DIR="+filepath.Join(data, "cache"))
			return cmd
		}},
	}
	run := func(s *series, cmd *exec.Cmd) {
		start := time.Now()
		out, err := cmd.CombinedOutput()
		d := time.Since(start)
		if err != nil || !strings.HasPrefix(string(out), "4950\n") {
			b.Fatalf("%s: %v: %s", s.name, err, out)
		}
		if s != nil {
			s.add(d)
		}
	}
	// One untimed round prepares the image and the disk template.
	for _, st := range steps {
		run(nil, st.cmd(-1))
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, st := range steps {
			run(st.s, st.cmd(i))
		}
	}
	b.StopTimer()
	table(os.Stderr, bare, hand, cold)
	b.ReportMetric(float64(bare.median().Microseconds())/1000, "bare-p50-ms")
	b.ReportMetric(float64(hand.median().Microseconds())/1000, "runc-p50-ms")
	b.ReportMetric(float64(cold.median().Microseconds())/1000, "corral-p50-ms")
	b.ReportMetric(float64(cold.median())/float64(bare.median()), "corral/bare")
	b.ReportMetric(float64(cold.median())/float64(hand.median()), "corral/runc")
}
