package validate

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/corralhq/corral/internal/fault"
)

var pathCases = []struct {
	path string
	ok   bool
}{
	{"a.txt", true},
	{"data/in.csv", true},
	{"ünï/ß.txt", true},
	{"", false},
	{"/etc/passwd", false},
	{"../x", false},
	{"a/../b", false},
	{"a//b", false},
	{"./a", false},
	{"a/", false},
	{"a\\b", false},
	{"a\x00b", false},
	{"a\nb", false},
	{"\xff", false},
	{strings.Repeat("d/", 16) + "f", false},
	{strings.Repeat("x", 256), false},
	{strings.Repeat("x/", 600), false},
}

func TestCheckInputPath(t *testing.T) {
	for _, c := range pathCases {
		if err := CheckInputPath(c.path); (err == nil) != c.ok {
			t.Errorf("%q: %v, want ok=%v", c.path, err, c.ok)
		}
	}
}

// FuzzCheckInputPath: a path it accepts stays inside its directory and is
// printable UTF-8, whatever the input.
func FuzzCheckInputPath(f *testing.F) {
	for _, c := range pathCases {
		f.Add(c.path)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if CheckInputPath(p) != nil {
			return
		}
		if strings.HasPrefix(p, "/") || !utf8.ValidString(p) || len(p) > 1024 {
			t.Fatalf("accepted %q", p)
		}
		for _, c := range strings.Split(p, "/") {
			if c == "" || c == "." || c == ".." {
				t.Fatalf("accepted %q", p)
			}
		}
	})
}

func TestValidID(t *testing.T) {
	for id, ok := range map[string]bool{
		"a": true, "exec-1.2_3:x": true, strings.Repeat("a", 128): true,
		"": false, "-a": false, ".a": false, "a/b": false, "a b": false, strings.Repeat("a", 129): false, "é": false,
	} {
		if ValidID(id) != ok {
			t.Errorf("ValidID(%q) = %v", id, !ok)
		}
	}
}

func TestCheckEnv(t *testing.T) {
	big := map[string]string{}
	for i := range 129 {
		big[strings.Repeat("V", i+1)] = "x"
	}
	for _, c := range []struct {
		env   map[string]string
		field string // "" when accepted
	}{
		{map[string]string{"GREETING": "hi", "_X1": ""}, ""},
		{map[string]string{"PATH": "/evil"}, "env.PATH"},
		{map[string]string{"CORRAL_X": "1"}, "env.CORRAL_X"},
		{map[string]string{"A=B": "1"}, "env"},
		{map[string]string{"1A": "1"}, "env"},
		{map[string]string{"A": "x\x00y"}, "env.A"},
		{map[string]string{"A": "\xff"}, "env.A"},
		{map[string]string{"A": strings.Repeat("x", 64<<10)}, "env"},
		{big, "env"},
	} {
		err := CheckEnv(c.env)
		var ie *InputError
		switch {
		case c.field == "" && err != nil:
			t.Errorf("%v refused: %v", c.env, err)
		case c.field != "" && (!errors.As(err, &ie) || ie.Field != c.field):
			t.Errorf("refusal %v, want field %q", err, c.field)
		}
	}
}

// TestInputErrorFault: an InputError is an invalid argument naming its
// field, in its message too.
func TestInputErrorFault(t *testing.T) {
	f := fault.Of(Refuse("limits.memory_mb", "%d is above %d", 9, 8))
	if f.Kind != fault.InvalidArgument || f.Field != "limits.memory_mb" || f.Message != "limits.memory_mb: 9 is above 8" {
		t.Errorf("%+v", f)
	}
}

func TestRenamed(t *testing.T) {
	for _, c := range []struct {
		v, old, want, spelled string
		refused               bool
	}{
		{"", "", "", "tier", false},
		{"gvisor", "", "gvisor", "tier", false},
		{"", "gvisor", "gvisor", "isolation", false},
		{"gvisor", "gvisor", "gvisor", "tier", false},
		{"container", "gvisor", "container", "isolation", true},
	} {
		v, old := c.v, c.old
		spelled, err := Renamed("tier", &v, "isolation", &old)
		if spelled != c.spelled {
			t.Errorf("%+v: spelled %q, want %q", c, spelled, c.spelled)
		}
		var ie *InputError
		if c.refused {
			if !errors.As(err, &ie) || ie.Field != "isolation" {
				t.Errorf("%+v: %v, want a refusal of isolation", c, err)
			}
			continue
		}
		if err != nil || v != c.want || old != "" {
			t.Errorf("%+v: %v, tier %q, isolation %q", c, err, v, old)
		}
	}
}

func TestDuration(t *testing.T) {
	for _, c := range []struct {
		n    int64
		unit time.Duration
		want time.Duration
	}{
		{0, time.Second, 0},
		{300, time.Second, 300 * time.Second},
		{-1, time.Second, -time.Second},
		{math.MinInt64, time.Second, math.MinInt64},
		{math.MaxInt64, time.Second, math.MaxInt64},
		{math.MaxInt64 / int64(time.Second), time.Second, time.Duration(math.MaxInt64/int64(time.Second)) * time.Second},
		{math.MaxInt64/int64(time.Second) + 1, time.Second, math.MaxInt64},
		{math.MinInt64/int64(time.Second) - 1, time.Second, math.MinInt64},
		{math.MinInt64, time.Nanosecond, math.MinInt64},
		{-9223372036854, time.Millisecond, -9223372036854 * time.Millisecond},
		{-9223372036855, time.Millisecond, math.MinInt64},
	} {
		if got := Duration(c.n, c.unit); got != c.want {
			t.Errorf("Duration(%d, %v) = %d, want %d", c.n, c.unit, got, c.want)
		}
	}
}

func TestCheckAbsPath(t *testing.T) {
	name := strings.Repeat("n", MaxName)
	long := "/" + strings.Repeat(name+"/", MaxPath/(MaxName+1)+1)
	long = long[:MaxPath]
	for _, c := range []struct {
		path string
		ok   bool
	}{
		{"/", true},
		{"/workspace", true},
		{"/workspace/" + name, true},
		{"/workspace/" + name + "n", false},
		{long, true},
		{long + "x", false},
		{"/" + strings.Repeat("a", 5000), false},
		{"/" + strings.Repeat("a", 1<<20), false},
		{"", false},
		{"workspace", false},
		{"/workspace/", false},
		{"/workspace/../etc", false},
		{"/workspace/./a", false},
		{"/workspace//a", false},
		{"/work\x00space", false},
		{"/ünï/ß", true},
	} {
		err := CheckAbsPath(c.path)
		if (err == nil) != c.ok {
			t.Errorf("CheckAbsPath(%.40q… %d bytes) = %v, want ok %v", c.path, len(c.path), err, c.ok)
		}
		if err != nil && len(err.Error()) > 200 {
			t.Errorf("a refusal quotes the path: %.80s…", err)
		}
	}
}
