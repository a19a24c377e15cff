package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
)

// snapshotRounds is how many times each timed snapshot figure is taken
// (its p50 is printed).
const snapshotRounds = 5

// forkCount is the fork row's count.
const forkCount = 10

// pandasSetup is the source sandbox's first cell: pandas imported and
// used, so that its memory holds it.
const pandasSetup = "import pandas as pd\ndf = pd.DataFrame({'a': range(100000)})\nx = int(df['a'].sum() % 1000)"

// BenchmarkSnapshot measures snapshots of a live gVisor python sandbox
// (the python image) whose code context has imported pandas (docs/bench.md,
// "Snapshots"): taking one (its time, how long the sandbox stopped, its
// size and what it stored), a second one's added bytes after a 1 MiB
// change, a resume on the same node (pause then resume: p50, and per GiB
// of saved memory), a sandbox made from a snapshot on the same node, and a
// fork to 10. It prints its figures; there is no baseline row: they are
// times and sizes of one machine, each checked (the context's x after a
// resume, in each fork).
func BenchmarkSnapshot(b *testing.B) {
	testenv.RequireRoot(b)
	testenv.Runtime(b, "runsc")
	testenv.Corral(b)
	testenv.PythonImage(b)
	ctx := b.Context()
	srv, err := startServer(b, "snapshot")
	if err != nil {
		b.Fatal(err)
	}
	c := sandbox.NewClient(sandbox.Config{Endpoint: srv.url, APIKey: apiKey, Timeout: clientTimeout})
	var out bytes.Buffer
	for b.Loop() {
		if out.Len() > 0 {
			continue // one measured pass: the figures are per operation
		}
		if err := snapshotFigures(ctx, b, c, &out); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(0, "ns/op")
	os.Stderr.Write(out.Bytes())
}

func snapshotFigures(ctx context.Context, b *testing.B, c *sandbox.Client, out *bytes.Buffer) error {
	sb, cc, wantX, err := pandasSandbox(ctx, c)
	if sb != nil {
		defer sb.Kill(context.WithoutCancel(ctx))
	}
	if err != nil {
		return err
	}
	var snaps []string
	defer func() {
		for _, id := range snaps {
			c.DeleteSnapshot(context.WithoutCancel(ctx), id)
		}
	}()

	// Taking a snapshot, snapshotRounds times: the first stores what the
	// sandbox holds, the next ones what changed since.
	var took, stopped []time.Duration
	var first sandbox.Snapshot
	for i := range snapshotRounds {
		t0 := time.Now()
		sn, err := sb.Snapshot(ctx, sandbox.CreateSnapshotRequest{})
		if err != nil {
			return fmt.Errorf("snapshot %d: %w", i, err)
		}
		took = append(took, time.Since(t0))
		stopped = append(stopped, time.Duration(sn.PausedMS)*time.Millisecond)
		snaps = append(snaps, sn.SnapshotID)
		if i == 0 {
			first = *sn
		}
		if !sn.Memory {
			return fmt.Errorf("snapshot %s kept no memory", sn.SnapshotID)
		}
	}
	if err := expectCell(ctx, sb, cc.ID, "x", wantX); err != nil {
		return fmt.Errorf("the source after its snapshots: %w", err)
	}
	// A 1 MiB change, then one more.
	change := make([]byte, 1<<20)
	rand.Read(change)
	if _, err := sb.Files().Write(ctx, "/workspace/change.bin", bytes.NewReader(change)); err != nil {
		return err
	}
	after, err := sb.Snapshot(ctx, sandbox.CreateSnapshotRequest{})
	if err != nil {
		return err
	}
	snaps = append(snaps, after.SnapshotID)

	// A sandbox made from the first snapshot, on this node.
	var made []time.Duration
	for i := range 3 {
		t0 := time.Now()
		cp, info, err := c.CreateSandbox(ctx, sandbox.CreateSandboxRequest{SnapshotID: first.SnapshotID, TimeoutSeconds: 600})
		if err != nil {
			return fmt.Errorf("create from the snapshot %d: %w", i, err)
		}
		made = append(made, time.Since(t0))
		err = expectCell(ctx, cp, cc.ID, "x", wantX)
		if info.Resume == nil || !info.Resume.Memory {
			err = errors.Join(err, fmt.Errorf("made from the snapshot without its memory: %+v", info.Resume))
		}
		cp.Kill(context.WithoutCancel(ctx))
		if err != nil {
			return err
		}
	}

	// A resume on this node: pause, then resume, timed.
	var resumes []time.Duration
	var image int64
	for i := range snapshotRounds {
		pinfo, err := sb.Pause(ctx)
		if err != nil {
			return fmt.Errorf("pause %d: %w", i, err)
		}
		if pinfo.Pause == nil || !pinfo.Pause.Memory {
			return fmt.Errorf("paused without its memory: %+v", pinfo.Pause)
		}
		image = pinfo.Pause.ImageBytes
		t0 := time.Now()
		if _, err := sb.Resume(ctx); err != nil {
			return fmt.Errorf("resume %d: %w", i, err)
		}
		resumes = append(resumes, time.Since(t0))
		if err := expectCell(ctx, sb, cc.ID, "x", wantX); err != nil {
			return fmt.Errorf("after resume %d: %w", i, err)
		}
	}

	// A fork to forkCount.
	t0 := time.Now()
	forks, err := sb.Fork(ctx, sandbox.ForkRequest{Count: forkCount, TimeoutSeconds: 600})
	forked := time.Since(t0)
	if err != nil {
		return fmt.Errorf("fork: %w", err)
	}
	var ferr error
	for i, f := range forks {
		if f.Error != nil {
			ferr = errors.Join(ferr, fmt.Errorf("fork %d: %s: %s", i, f.Error.Code, f.Error.Message))
			continue
		}
		fs := c.Sandbox(f.Sandbox.SandboxID)
		ferr = errors.Join(ferr, expectCell(ctx, fs, cc.ID, "x", wantX))
		fs.Kill(context.WithoutCancel(ctx))
	}
	if ferr != nil {
		return ferr
	}

	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	mib := func(n int64) float64 { return float64(n) / (1 << 20) }
	perGiB := ms(p50(resumes)) / (float64(image) / (1 << 30))
	fmt.Fprintf(out, "\nsnapshots: a gVisor python sandbox (python image) with pandas imported in a context\n")
	fmt.Fprintf(out, "  %-58s %10.0f ms  (stopped p50 %.0f ms; %d rounds)\n", "take a snapshot, p50", ms(p50(took)), ms(p50(stopped)), snapshotRounds)
	fmt.Fprintf(out, "  %-58s %10.1f MiB (disk image's sparse size and saved memory); first stored %.1f MiB compressed\n",
		"snapshot size", mib(first.SizeBytes), mib(first.StoredBytes))
	fmt.Fprintf(out, "  %-58s %10.1f MiB\n", "second snapshot's added bytes, nothing changed (p50)", mib(p50Int(storedAfterFirst(c, ctx, snaps[1:snapshotRounds]))))
	fmt.Fprintf(out, "  %-58s %10.1f MiB\n", "a snapshot's added bytes after a 1 MiB change", mib(after.StoredBytes))
	fmt.Fprintf(out, "  %-58s %10.0f ms\n", "resume on the same node (pause, then resume), p50", ms(p50(resumes)))
	fmt.Fprintf(out, "  %-58s %10.0f ms  (saved memory %.1f MiB)\n", "resume per GiB of saved memory", perGiB, mib(image))
	fmt.Fprintf(out, "  %-58s %10.0f ms\n", "a sandbox made from the snapshot, same node, p50", ms(p50(made)))
	fmt.Fprintf(out, "  %-58s %10.0f ms  (%.0f ms per fork)\n", fmt.Sprintf("fork to %d", forkCount), ms(forked), ms(forked)/forkCount)
	b.ReportMetric(ms(p50(took)), "snapshot-p50-ms")
	b.ReportMetric(mib(first.StoredBytes), "snapshot-stored-MiB")
	b.ReportMetric(mib(after.StoredBytes), "snapshot-1MiB-change-MiB")
	b.ReportMetric(ms(p50(resumes)), "resume-p50-ms")
	b.ReportMetric(perGiB, "resume-ms-per-GiB")
	b.ReportMetric(ms(forked), "fork10-ms")
	return nil
}

// pandasSandbox makes the sandbox both snapshot benchmarks measure: a
// gVisor python sandbox (python image) whose code context cc has run
// pandasSetup, and what x holds there. The sandbox, once made, is returned
// even with an error, for the caller to kill.
func pandasSandbox(ctx context.Context, c *sandbox.Client) (sb *sandbox.Sandbox, cc *sandbox.CodeContext, x string, err error) {
	sb, info, err := c.CreateSandbox(ctx, sandbox.CreateSandboxRequest{Language: "python", Image: "python",
		Tier: sandbox.IsolationGVisor, TimeoutSeconds: liveTimeout})
	if err != nil {
		return nil, nil, "", fmt.Errorf("create the sandbox: %w", err)
	}
	if info.Tier != string(sandbox.IsolationGVisor) {
		return sb, nil, "", fmt.Errorf("sandbox on %s, want gvisor", info.Tier)
	}
	if cc, err = sb.CreateContext(ctx, sandbox.ContextRequest{Language: "python"}); err != nil {
		return sb, nil, "", err
	}
	if err := expectCell(ctx, sb, cc.ID, pandasSetup, ""); err != nil {
		return sb, nil, "", err
	}
	ex, err := sb.RunCode(ctx, cc.ID, "x", sandbox.RunCodeOptions{Timeout: execTimeout})
	if err != nil {
		return sb, nil, "", err
	}
	return sb, cc, ex.Text(), nil
}

// moveRounds is how many times BenchmarkSnapshotMove moves its sandbox.
const moveRounds = 3

// BenchmarkSnapshotMove measures a resume on another node (docs/bench.md,
// "Snapshots"): two nodes sharing PostgreSQL, Redis and an S3 store, with
// sessions.snapshots on, and a gVisor python sandbox with pandas imported
// in a code context. Each round the sandbox is paused on the node that
// owns it (its snapshot written to S3), that node is drained (SIGTERM:
// it hands the sandbox off) and a fresh node takes its place; then the
// sandbox is resumed through the other node, which takes it over:
// downloads its snapshot, restores its memory. The resume's time is the
// figure (p50 over the rounds), checked by the context's x afterwards.
func BenchmarkSnapshotMove(b *testing.B) {
	testenv.RequireRoot(b)
	testenv.Runtime(b, "runsc")
	testenv.Corral(b)
	testenv.PythonImage(b)
	ctx := b.Context()
	storeURL, stateURL, blobURL := testenv.Postgres(b), testenv.Redis(b), testenv.S3(b)
	const extra = "\n[cluster]\nheartbeat = \"500ms\"\nlost_after = \"5s\"\n\n[sessions]\nsnapshots = true\n"
	n := 0
	node := func() (*server, error) {
		n++
		return startServerFlags(b, fmt.Sprintf("move-%d", n), extra,
			[]string{"--store", storeURL, "--state", stateURL, "--blob", blobURL, "--node-id", fmt.Sprintf("node-%d", n)})
	}
	var out bytes.Buffer
	for b.Loop() {
		if out.Len() > 0 {
			continue // one measured pass: the figure is per move
		}
		if err := moveFigures(ctx, node, &out); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(0, "ns/op")
	os.Stderr.Write(out.Bytes())
}

func moveFigures(ctx context.Context, node func() (*server, error), out *bytes.Buffer) error {
	owner, err := node()
	if err != nil {
		return err
	}
	other, err := node()
	if err != nil {
		return err
	}
	client := func(s *server) *sandbox.Client {
		return sandbox.NewClient(sandbox.Config{Endpoint: s.url, APIKey: apiKey, Timeout: clientTimeout})
	}
	sb, cc, wantX, err := pandasSandbox(ctx, client(owner))
	if sb != nil {
		id := sb.ID
		defer func() { client(other).Sandbox(id).Kill(context.WithoutCancel(ctx)) }()
	}
	if err != nil {
		return err
	}
	id := sb.ID
	var resumes []time.Duration
	var image int64
	for i := range moveRounds {
		pinfo, err := client(owner).Sandbox(id).Pause(ctx)
		if err != nil {
			return fmt.Errorf("round %d: pause: %w", i, err)
		}
		if pinfo.Pause == nil || !pinfo.Pause.Memory || pinfo.Pause.SnapshotID == "" {
			return fmt.Errorf("round %d: paused without its memory or a snapshot in the store: %+v", i, pinfo.Pause)
		}
		image = pinfo.Pause.ImageBytes
		if err := owner.stop(); err != nil {
			return fmt.Errorf("round %d: drain %s: %w", i, owner.name, err)
		}
		t0 := time.Now()
		info, err := client(other).Sandbox(id).Resume(ctx)
		if err != nil {
			return fmt.Errorf("round %d: resume through %s: %w", i, other.name, err)
		}
		resumes = append(resumes, time.Since(t0))
		if info.Resume == nil || !info.Resume.Memory {
			return fmt.Errorf("round %d: resumed elsewhere without its memory: %+v", i, info.Resume)
		}
		if err := expectCell(ctx, client(other).Sandbox(id), cc.ID, "x", wantX); err != nil {
			return fmt.Errorf("round %d: after the move: %w", i, err)
		}
		// The node that took it over owns it now; a fresh node stands in
		// for the drained one.
		if owner, err = node(); err != nil {
			return err
		}
		owner, other = other, owner
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	fmt.Fprintf(out, "\nsnapshots across nodes: the same sandbox, its snapshot in S3 (versitygw on loopback)\n")
	fmt.Fprintf(out, "  %-58s %10.0f ms  (saved memory %.1f MiB; %d rounds, each %v)\n", "resume on another node after a drain, p50",
		ms(p50(resumes)), float64(image)/(1<<20), moveRounds, roundMS(resumes))
	return nil
}

// roundMS is ds in whole milliseconds.
func roundMS(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}

// storedAfterFirst is what each of snapshots ids stored.
func storedAfterFirst(c *sandbox.Client, ctx context.Context, ids []string) []int64 {
	var out []int64
	for _, id := range ids {
		if sn, err := c.GetSnapshot(ctx, id); err == nil {
			out = append(out, sn.StoredBytes)
		}
	}
	return out
}

func p50(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func p50Int(ns []int64) int64 {
	if len(ns) == 0 {
		return 0
	}
	s := slices.Clone(ns)
	slices.Sort(s)
	return s[len(s)/2]
}
