package engine

import "testing"

func TestReadyCPU(t *testing.T) {
	for _, c := range []struct {
		ready string
		want  int
	}{
		{`{"python":"3.11.2","modules":[],"failed":[],"cpu":1}`, 1},
		{`{"cpu":0}`, 0},
		{`{"python":"3.11.2"}`, -1}, // an older zygote
		{`{"cpu":-3}`, -1},
		{`{"cpu":"1"}`, -1},
		{``, -1},
		{`null`, -1},
	} {
		if got := readyCPU([]byte(c.ready)); got != c.want {
			t.Errorf("readyCPU(%s) = %d, want %d", c.ready, got, c.want)
		}
	}
}
