package kernel

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/lang"
	"github.com/corralhq/corral/internal/testenv"
)

// splitAll feeds in to a rawStream in chunks of size n and returns the
// text and the markers' cells it found, in order, as one string.
func splitAll(in string, n int) string {
	var rs rawStream
	var b strings.Builder
	text := func(s string) { b.WriteString(s) }
	mark := func(cell uint64) { fmt.Fprintf(&b, "<%d>", cell) }
	for len(in) > 0 {
		k := min(n, len(in))
		rs.split([]byte(in[:k]), text, mark)
		in = in[k:]
	}
	b.Write(rs.held)
	return b.String()
}

func TestRawStream(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"hello\n", "hello\n"},
		{"a\x00corral-end:7\x00b", "a<7>b"},
		{"\x00corral-end:7\x00\x00corral-end:8\x00", "<7><8>"},
		{"nul\x00 of its own\x00", "nul\x00 of its own\x00"},
		{"\x00corral-end:x\x00", "\x00corral-end:x\x00"},
		{"\x00corral-end:" + strings.Repeat("1", 40) + "\x00", "\x00corral-end:" + strings.Repeat("1", 40) + "\x00"},
		{"é€😀\x00corral-end:12\x00é", "é€😀<12>é"},
	} {
		for _, n := range []int{1, 2, 3, 5, 1000} {
			if got := splitAll(c.in, n); got != c.want {
				t.Errorf("%q in chunks of %d: %q, want %q", c.in, n, got, c.want)
			}
		}
	}
}

// TestPythonRawEndMark: the marker python's context runner writes at a
// cell's end (python_context.py's RAW_END_MARK, as Go delivers the runner)
// is one rawStream finds, for the largest cell id too.
func TestPythonRawEndMark(t *testing.T) {
	r, _ := lang.Get("python")
	program := r.(lang.Contexter).ContextStep().Argv[2]
	for _, cell := range []uint64{7, math.MaxUint64} {
		var mark string
		expr := fmt.Sprintf("(RAW_END_MARK %% %d).decode('ascii')", cell)
		if err := json.Unmarshal(testenv.PythonEval(t, program, expr), &mark); err != nil {
			t.Fatal(err)
		}
		if len(mark) > maxRawEndMark {
			t.Errorf("python's marker %q is longer than maxRawEndMark (%d)", mark, maxRawEndMark)
		}
		want := fmt.Sprintf("a<%d>b", cell)
		for _, n := range []int{1, 1000} {
			if got := splitAll("a"+mark+"b", n); got != want {
				t.Errorf("python's marker %q in chunks of %d: %q, want %q", mark, n, got, want)
			}
		}
	}
}

// FuzzRawStream: however a context's raw output is cut into chunks, the
// text and markers found are the same, and the text is never altered.
func FuzzRawStream(f *testing.F) {
	for _, s := range []string{"hello\n", "a\x00corral-end:7\x00b", "é€\x00x", "\x00corral-end:"} {
		f.Add(s, 3)
	}
	f.Fuzz(func(t *testing.T, in string, n int) {
		n = 1 + abs(n)%64
		whole, cut := splitAll(in, len(in)+1), splitAll(in, n)
		if whole != cut {
			t.Errorf("%q: whole %q, in chunks of %d %q", in, whole, n, cut)
		}
	})
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

func TestStatusEvents(t *testing.T) {
	o := &output{}
	s := o.begin(5)
	lines := `{"type":"stdout","text":"a","cell":5}` + "\n" +
		`{"type":"stdout","text":"old","cell":4}` + "\n" +
		`not json` + "\n" +
		`{"type":"bogus","cell":5}` + "\n" +
		`{"type":"result","data":{"text/plain":"1"},"is_main_result":true,"cell":5}` + "\n" +
		`{"type":"end_of_execution","cell":5}` + "\n"
	for i := 0; i < len(lines); i += 7 {
		o.Status([]byte(lines[i:min(i+7, len(lines))]))
	}
	var types []string
	for _, ev := range s.take() {
		types = append(types, ev.Type+":"+ev.Text+ev.Data["text/plain"])
	}
	if want := []string{"stdout:a", "result:1", "end_of_execution:"}; !slices.Equal(types, want) {
		t.Errorf("events %v, want %v", types, want)
	}
}
