package config

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestSize: images.ParseSize's grammar in, an exact binary unit out.
func TestSize(t *testing.T) {
	for in, want := range map[string]string{"20GiB": "20GiB", "20G": "20GiB", "1.5g": "1536MiB", "512MiB": "512MiB",
		"1000": "1000", "1kb": "1000", "0": "0", "2TiB": "2TiB", "21474836480": "20GiB"} {
		var s Size
		if err := s.UnmarshalText([]byte(in)); err != nil || s.String() != want {
			t.Errorf("%q: %v, %v; want %s", in, s, err, want)
		}
	}
	for _, in := range []string{"", "lots", "-1G", "1Q"} {
		var s Size
		if err := s.Set(in); err == nil {
			t.Errorf("%q: no error", in)
		}
	}
}

// TestDuration: Go durations, and errors that quote the value.
func TestDuration(t *testing.T) {
	var d Duration
	if err := d.Set("1h30m"); err != nil || time.Duration(d) != 90*time.Minute || d.String() != "1h30m0s" {
		t.Errorf("1h30m: %v, %v", d, err)
	}
	for _, in := range []string{"", "30", "soon", "1 h"} {
		if err := d.Set(in); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%q", in)) {
			t.Errorf("%q: %v", in, err)
		}
	}
}
