package sqlstore

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/sandbox"
)

func TestTimeRoundTrip(t *testing.T) {
	zone := time.FixedZone("X", -7*3600)
	tests := []struct {
		name string
		in   time.Time
		want time.Time
	}{
		{"zero", time.Time{}, time.Time{}},
		{"zero in a zone", time.Time{}.In(zone), time.Time{}},
		{"epoch", time.Unix(0, 0), time.Unix(0, 0).UTC()},
		{"nanoseconds are cut", time.Date(2025, 1, 2, 3, 4, 5, 999999999, zone), time.Date(2025, 1, 2, 10, 4, 5, 999999000, time.UTC)},
		{"before the epoch", time.Date(1900, 1, 1, 0, 0, 0, 1000, time.UTC), time.Date(1900, 1, 1, 0, 0, 0, 1000, time.UTC)},
	}
	for _, tt := range tests {
		got := Time(Micros(normTime(tt.in)))
		if got != tt.want { // == on purpose: location and all
			t.Errorf("%s: %v round-trips to %v, want %v", tt.name, tt.in, got, tt.want)
		}
	}
	if a, b := Micros(time.Time{}), Micros(time.Unix(0, 0)); a >= b {
		t.Errorf("the zero time (%d) does not sort before the epoch (%d)", a, b)
	}
}

func TestNewRow(t *testing.T) {
	exit := 1
	in := &store.Execution{Tenant: "t", ID: "x", Request: []byte("{}"), Record: sandbox.Result{
		Language: "go", Status: sandbox.StatusFailed, ExitCode: &exit,
		Error:     &sandbox.Failure{Type: sandbox.ErrRuntime},
		Artifacts: []sandbox.Artifact{{Path: "a", ExpiresAt: time.Date(2025, 1, 1, 0, 0, 0, 1, time.Local)}},
		Callback:  &sandbox.CallbackState{NextAttempt: time.Date(2025, 1, 1, 0, 0, 0, 1999, time.Local)},
		CreatedAt: time.Date(2025, 1, 1, 0, 0, 0, 123456789, time.Local),
	}}
	before := *in
	row, err := NewRow(in)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&before, in); diff != "" {
		t.Errorf("NewRow changed its argument:\n%s", diff)
	}
	r := row.Execution.Record
	if r.ExecutionID != "x" {
		t.Errorf("ExecutionID %q, want the execution's id", r.ExecutionID)
	}
	for name, tm := range map[string]time.Time{"created": r.CreatedAt, "expires": r.Artifacts[0].ExpiresAt,
		"callback next attempt": r.Callback.NextAttempt} {
		if tm.Location() != time.UTC || tm.Nanosecond()%1000 != 0 {
			t.Errorf("%s: %v, want microseconds in UTC", name, tm)
		}
	}
	if r.ExitCode == in.Record.ExitCode || &r.Artifacts[0] == &in.Record.Artifacts[0] || r.Callback == in.Record.Callback {
		t.Error("the stored execution shares memory with the argument")
	}
	got := row.InsertArgs()
	want := []any{"t", "x", "", "{}", row.record, "", "", "", "go", "failed", "runtime_error", int64(1), int64(0),
		Micros(r.CreatedAt), Micros(time.Time{}), ""}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("InsertArgs (-want +got):\n%s", diff)
	}
}

func TestCursorRoundTrip(t *testing.T) {
	for _, c := range []cursor{
		{Sort: "-created_at", Value: 1741964966535897, ID: "exec-1"},
		{Sort: "duration_ms", Value: 0, ID: `'; "quoted" 🦀`},
		{Sort: "created_at", Value: -62135596800000000, ID: "x"},
		{Sort: "-duration_ms", Value: 1<<63 - 1, ID: strings.Repeat("i", 512)},
	} {
		s := c.encode()
		if strings.ContainsAny(s, "+/=&?# ") {
			t.Errorf("cursor %q is not URL-safe", s)
		}
		got, err := decodeCursor(s)
		if err != nil {
			t.Errorf("decode %+v: %v", c, err)
			continue
		}
		if got != c {
			t.Errorf("cursor %+v round-trips to %+v", c, got)
		}
	}
}

// badCursors are cursors a client may send that this store never made.
var badCursors = []string{
	"",
	"!!!",
	"e30",                              // {}
	"eyJzIjoiaWQiLCJ2IjoxLCJpIjoieCJ9", // {"s":"id","v":1,"i":"x"}: unknown sort
	"eyJzIjoiY3JlYXRlZF9hdCIsInYiOjF9", // no id
	"eyJzIjoiY3JlYXRlZF9hdCIsInYiOiIxIiwiaSI6IngifQ",     // value is a string
	"eyJzIjoiY3JlYXRlZF9hdCIsInYiOjEsImkiOiJ4In17fQ",     // trailing data
	"eyJzIjoiY3JlYXRlZF9hdCIsInYiOjEsImkiOiJcdTAwMDAifQ", // NUL in id
}

func TestDecodeCursorRejects(t *testing.T) {
	for _, s := range badCursors {
		if c, err := decodeCursor(s); err == nil {
			t.Errorf("decodeCursor(%q) = %+v, want an error", s, c)
		}
	}
}

func FuzzDecodeCursor(f *testing.F) {
	for _, s := range badCursors {
		f.Add(s)
	}
	f.Add(cursor{Sort: "-created_at", Value: 42, ID: "x"}.encode())
	f.Fuzz(func(t *testing.T, s string) {
		c, err := decodeCursor(s)
		if err != nil {
			return
		}
		// A cursor that decodes is one this store could have made.
		again, err := decodeCursor(c.encode())
		if err != nil || again != c {
			t.Fatalf("%q decodes to %+v, which re-encodes to %+v, %v", s, c, again, err)
		}
		if _, err := NewList("t", store.Query{Sort: c.Sort, Cursor: s}); err != nil {
			t.Fatalf("NewList with the valid cursor %q: %v", s, err)
		}
	})
}

func TestNewList(t *testing.T) {
	minus1 := -1
	tests := []struct {
		name      string
		q         store.Query
		wantLimit int
		wantSQL   string // a part of it
		wantErr   bool
	}{
		{name: "defaults", q: store.Query{}, wantLimit: 50, wantSQL: "ORDER BY created_at DESC, id DESC LIMIT $2"},
		{name: "clamped", q: store.Query{Limit: 5000}, wantLimit: 1000},
		{name: "ascending duration", q: store.Query{Sort: "duration_ms", Limit: 3}, wantLimit: 3, wantSQL: "ORDER BY duration_ms ASC, id ASC"},
		{name: "exit code", q: store.Query{ExitCodeNe: &minus1}, wantLimit: 50, wantSQL: "exit_code IS NOT NULL AND exit_code <> $2"},
		{name: "cursor", q: store.Query{Cursor: cursor{Sort: "-created_at", Value: 1, ID: "x"}.encode()}, wantLimit: 50,
			wantSQL: "(created_at, id) < ($2, $3)"},
		{name: "negative limit", q: store.Query{Limit: -1}, wantErr: true},
		{name: "unknown sort", q: store.Query{Sort: "-status"}, wantErr: true},
		{name: "cursor of another sort", q: store.Query{Sort: "created_at", Cursor: cursor{Sort: "-created_at", Value: 1, ID: "x"}.encode()}, wantErr: true},
		{name: "invalid filter text", q: store.Query{Language: "\xff"}, wantErr: true},
	}
	for _, tt := range tests {
		l, err := NewList("t", tt.q)
		if (err != nil) != tt.wantErr {
			t.Errorf("%s: NewList error %v, want error %v", tt.name, err, tt.wantErr)
			continue
		}
		if err != nil {
			continue
		}
		if l.limit != tt.wantLimit || l.Args[len(l.Args)-1] != int64(tt.wantLimit+1) {
			t.Errorf("%s: limit %d (queried %v), want %d", tt.name, l.limit, l.Args[len(l.Args)-1], tt.wantLimit)
		}
		if !strings.Contains(l.SQL, tt.wantSQL) {
			t.Errorf("%s: SQL %q lacks %q", tt.name, l.SQL, tt.wantSQL)
		}
	}
}
