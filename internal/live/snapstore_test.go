package live

import (
	"errors"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/snapshot"
	"github.com/corralhq/corral/sandbox"
)

// TestPauseIsSnapshot: with a snapshot store every pause writes the
// paused sandbox there and names it in its description (MetaPause set);
// a resume, a kill and the paused TTL's expiry each delete it; a second
// pause writes a snapshot of its own.
func TestPauseIsSnapshot(t *testing.T) {
	snaps := snapshots(t)
	u := newUnit(t, func(c *Config) { c.Snapshots, c.PauseSnapshots = snaps, true; c.PausedTTL = time.Hour })
	ctx := t.Context()
	paused := func(id string) string {
		t.Helper()
		if err := u.m.Pause(ctx, "t", id); err != nil {
			t.Fatalf("pause %s: %v", id, err)
		}
		info, err := u.m.Sandbox("t", id)
		if err != nil || info.Pause == nil || info.Pause.SnapshotID == "" {
			t.Fatalf("paused %s: %+v, %v; want a snapshot named", id, info.Pause, err)
		}
		man, err := snaps.Get(ctx, info.Pause.SnapshotID)
		if err != nil || man.Meta.Extra[MetaPause] != "true" || man.Meta.Extra[MetaSandbox] != id {
			t.Fatalf("%s's snapshot: %+v, %v", id, man, err)
		}
		return man.ID
	}
	gone := func(what, snap string) {
		t.Helper()
		if _, err := snaps.Get(ctx, snap); !errors.Is(err, snapshot.ErrNotFound) {
			t.Errorf("after %s, the snapshot: %v; want it deleted", what, err)
		}
	}
	for _, id := range []string{"box", "doomed", "old"} {
		if _, err := u.m.Create(ctx, "t", sandbox.CreateSandboxRequest{SandboxID: id, TimeoutSeconds: 600}); err != nil {
			t.Fatal(err)
		}
	}
	snap := paused("box")
	if _, err := u.m.Resume(ctx, "t", "box"); err != nil {
		t.Fatal(err)
	}
	gone("the resume", snap)
	if second := paused("box"); second == snap {
		t.Errorf("a second pause named the first one's snapshot %s", snap)
	}

	snap = paused("doomed")
	if err := u.m.Delete(ctx, "t", "doomed"); err != nil {
		t.Fatal(err)
	}
	gone("the kill", snap)

	snap = paused("old")
	u.clock.Advance(2 * time.Hour)
	u.table.Reap()
	if _, err := u.m.Sandbox("t", "old"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a sandbox paused past its TTL: %v, want it gone", err)
	}
	gone("the paused TTL", snap)
}
