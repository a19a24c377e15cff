package images

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// TestPlanEviction checks the eviction policy alone; TestEvictLeastRecentlyUsed
// (store_sandbox_test.go) checks it on a real store, as root.
func TestPlanEviction(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(h int) time.Time { return t0.Add(time.Duration(h) * time.Hour) }
	rec := func(name, v string) record { return record{Name: name, Version: v} }
	for _, tc := range []struct {
		name     string
		budget   int64
		recs     []record
		versions map[string]usage
		// The new image: its name, version and size.
		image, version string
		size           int64
		want           []string // names evicted, in order
		noRoom         bool
	}{
		{
			name:   "fits",
			budget: 30,
			recs:   []record{rec("a", "va")},
			versions: map[string]usage{
				"va": {size: 10, lastUsed: at(0)},
			},
			image: "b", version: "vb", size: 20,
		},
		{
			name:   "least recently used first",
			budget: 25,
			recs:   []record{rec("a", "va"), rec("b", "vb")},
			versions: map[string]usage{
				"va": {size: 10, lastUsed: at(2)},
				"vb": {size: 10, lastUsed: at(1)},
			},
			image: "c", version: "vc", size: 10,
			want: []string{"b"},
		},
		{
			name:   "as many as it takes, oldest first",
			budget: 30,
			recs:   []record{rec("a", "va"), rec("b", "vb"), rec("c", "vc")},
			versions: map[string]usage{
				"va": {size: 10, lastUsed: at(3)},
				"vb": {size: 10, lastUsed: at(1)},
				"vc": {size: 10, lastUsed: at(2)},
			},
			image: "d", version: "vd", size: 20,
			want: []string{"b", "c"},
		},
		{
			name:   "by name among equals",
			budget: 25,
			recs:   []record{rec("b", "vb"), rec("a", "va")},
			versions: map[string]usage{
				"va": {size: 10, lastUsed: at(1)},
				"vb": {size: 10, lastUsed: at(1)},
			},
			image: "c", version: "vc", size: 10,
			want: []string{"a"},
		},
		{
			name:   "never one in use",
			budget: 25,
			recs:   []record{rec("a", "va"), rec("b", "vb")},
			versions: map[string]usage{
				"va": {size: 10, lastUsed: at(2)},
				"vb": {size: 10, lastUsed: at(1), inUse: true},
			},
			image: "c", version: "vc", size: 10,
			want: []string{"a"},
		},
		{
			name:   "nothing unless enough",
			budget: 25,
			recs:   []record{rec("a", "va"), rec("b", "vb")},
			versions: map[string]usage{
				"va": {size: 10, lastUsed: at(1)},
				"vb": {size: 10, lastUsed: at(2), inUse: true},
			},
			image: "c", version: "vc", size: 20,
			noRoom: true,
		},
		{
			name:     "larger than the budget",
			budget:   25,
			versions: map[string]usage{},
			image:    "c", version: "vc", size: 30,
			noRoom: true,
		},
		{
			name:   "content already stored needs no room",
			budget: 20,
			recs:   []record{rec("a", "va"), rec("b", "vb")},
			versions: map[string]usage{
				"va": {size: 10, lastUsed: at(1)},
				"vb": {size: 10, lastUsed: at(2)},
			},
			image: "c", version: "va", size: 10,
		},
		{
			name:   "never an image on the new version",
			budget: 15,
			recs:   []record{rec("a", "va"), rec("b", "vb")},
			versions: map[string]usage{
				"va": {size: 10, lastUsed: at(1)},
				"vb": {size: 10, lastUsed: at(2)},
			},
			image: "c", version: "va", size: 10,
			want: []string{"b"},
		},
		{
			name:   "a rebuild frees its old version",
			budget: 25,
			recs:   []record{rec("a", "va1"), rec("b", "vb")},
			versions: map[string]usage{
				"va1": {size: 10, lastUsed: at(2)},
				"vb":  {size: 10, lastUsed: at(1)},
			},
			image: "a", version: "va2", size: 10,
		},
		{
			name:   "a rebuild's old version in use still counts",
			budget: 25,
			recs:   []record{rec("a", "va1"), rec("b", "vb")},
			versions: map[string]usage{
				"va1": {size: 10, lastUsed: at(2), inUse: true},
				"vb":  {size: 10, lastUsed: at(1)},
			},
			image: "a", version: "va2", size: 10,
			want: []string{"b"},
		},
		{
			name:   "a rebuild's old version another name shares still counts",
			budget: 25,
			recs:   []record{rec("a", "va1"), rec("a2", "va1"), rec("b", "vb")},
			versions: map[string]usage{
				"va1": {size: 10, lastUsed: at(2)},
				"vb":  {size: 10, lastUsed: at(1)},
			},
			image: "a", version: "va2", size: 10,
			want: []string{"b"},
		},
		{
			name:   "a shared version is freed by evicting every name on it",
			budget: 25,
			recs:   []record{rec("a", "vs"), rec("b", "vs"), rec("c", "vc")},
			versions: map[string]usage{
				"vs": {size: 20, lastUsed: at(1)},
				"vc": {size: 5, lastUsed: at(3)},
			},
			image: "d", version: "vd", size: 20,
			want: []string{"a", "b"},
		},
		{
			name:   "a version no name refers to counts",
			budget: 25,
			recs:   []record{rec("a", "va")},
			versions: map[string]usage{
				"va":     {size: 10, lastUsed: at(1)},
				"orphan": {size: 10, inUse: true},
			},
			image: "b", version: "vb", size: 10,
			want: []string{"a"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan, err := planEviction(tc.budget, tc.recs, tc.versions, tc.image, tc.version, tc.size)
			if tc.noRoom {
				if !errors.Is(err, ErrNoRoom) || plan != nil {
					t.Fatalf("planEviction = %v, %v; want nothing and ErrNoRoom", plan, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range plan {
				got = append(got, r.Name)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("evicts %v, want %v", got, tc.want)
			}
		})
	}
}
