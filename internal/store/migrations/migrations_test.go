package migrations

import (
	"strings"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"
)

func TestParse(t *testing.T) {
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	tests := []struct {
		name    string
		fs      fstest.MapFS
		want    []Migration
		wantErr string
	}{
		{
			name: "numeric order, not lexical",
			fs:   fstest.MapFS{"10_b.sql": file("B"), "9_a.sql": file("A"), "README": file("x")},
			want: []Migration{{Version: 9, Name: "9_a.sql", SQL: "A"}, {Version: 10, Name: "10_b.sql", SQL: "B"}},
		},
		{name: "empty", fs: fstest.MapFS{}},
		{name: "no number", fs: fstest.MapFS{"init.sql": file("")}, wantErr: "not NNNN_name.sql"},
		{name: "zero", fs: fstest.MapFS{"0000_init.sql": file("")}, wantErr: "not NNNN_name.sql"},
		{name: "duplicate", fs: fstest.MapFS{"1_a.sql": file(""), "0001_b.sql": file("")}, wantErr: "same version 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parse(tt.fs)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parse: err %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("parse (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPending(t *testing.T) {
	all, err := All()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) == 0 || all[0].Version != 1 {
		t.Fatalf("All: %v, want the first migration to be version 1", all)
	}
	tests := []struct {
		name    string
		applied []int64
		want    int
	}{
		{"fresh database", nil, len(all)},
		{"up to date", versions(all), 0},
		{"newer database", append(versions(all), 1<<40), 0},
		{"first applied", []int64{1}, len(all) - 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Pending(tt.applied)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tt.want {
				t.Errorf("Pending(%v) = %d migrations, want %d", tt.applied, len(got), tt.want)
			}
		})
	}
}

func versions(ms []Migration) []int64 {
	var out []int64
	for _, m := range ms {
		out = append(out, m.Version)
	}
	return out
}
