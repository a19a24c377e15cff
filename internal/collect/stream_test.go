package collect

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestStreamKeepsEverythingWhenSmall(t *testing.T) {
	s := NewStream(8)
	for _, p := range []string{"ab", "cd\n", "ef", "gh\nij"} {
		s.Write([]byte(p))
	}
	if got := s.Text(); got != "abcd\nefgh\nij" {
		t.Errorf("text %q", got)
	}
	if s.Truncated() || s.Bytes() != 12 || s.Lines() != 3 {
		t.Errorf("truncated %v bytes %d lines %d", s.Truncated(), s.Bytes(), s.Lines())
	}
}

// TestStreamHeadAndTail writes random chunk sizes and checks head, tail and
// totals against the whole input.
func TestStreamHeadAndTail(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 200; trial++ {
		keep := 1 + r.IntN(64)
		var all bytes.Buffer
		s := NewStream(keep)
		for n := r.IntN(20); n > 0; n-- {
			chunk := make([]byte, r.IntN(3*keep))
			for i := range chunk {
				chunk[i] = "abc\n"[r.IntN(4)]
			}
			all.Write(chunk)
			s.Write(chunk)
		}
		b := all.Bytes()
		if s.Bytes() != int64(len(b)) {
			t.Fatalf("bytes %d, want %d", s.Bytes(), len(b))
		}
		lines := int64(bytes.Count(b, []byte("\n")))
		if len(b) > 0 && b[len(b)-1] != '\n' {
			lines++
		}
		if s.Lines() != lines {
			t.Fatalf("lines %d, want %d", s.Lines(), lines)
		}
		text := s.Text()
		if len(b) <= 2*keep {
			if text != string(b) || s.Truncated() {
				t.Fatalf("keep %d, %d bytes: text %q, want all %q", keep, len(b), text, b)
			}
			continue
		}
		head, rest, ok := strings.Cut(text, "\n[… ")
		if !ok || !s.Truncated() {
			t.Fatalf("no marker in %q", text)
		}
		_, tail, _ := strings.Cut(rest, " …]\n")
		if head != string(b[:keep]) || tail != string(b[len(b)-keep:]) {
			t.Fatalf("head %q tail %q of %q (keep %d)", head, tail, b, keep)
		}
	}
}

func TestStreamTextIsValidUTF8(t *testing.T) {
	s := NewStream(5)
	// Multi-byte runes cut at both ends, invalid bytes and escapes.
	s.Write([]byte("ééééé\xff\x1b[2Jmiddle-middle-middleééééé"))
	text := s.Text()
	if !utf8.ValidString(text) {
		t.Errorf("invalid UTF-8: %q", text)
	}
	if !strings.HasPrefix(text, "éé") || !strings.HasSuffix(text, "éé") {
		t.Errorf("text %q", text)
	}
}

func TestStreamMemoryBounded(t *testing.T) {
	s := NewStream(1024)
	chunk := bytes.Repeat([]byte("x"), 100)
	for i := 0; i < 100000; i++ {
		s.Write(chunk)
	}
	// Head plus a tail that is trimmed when it doubles, with append's slack.
	if c := cap(s.head) + cap(s.tail); c > 4*1024 {
		t.Errorf("head cap %d + tail cap %d for keep 1024", cap(s.head), cap(s.tail))
	}
}

func FuzzStream(f *testing.F) {
	f.Add([]byte("hello\nworld"), uint8(3))
	f.Add([]byte("\xff\xfe é\n"), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, keep uint8) {
		s := NewStream(int(keep%32) + 1)
		for len(data) > 0 {
			n := min(len(data), 7)
			s.Write(data[:n])
			data = data[n:]
		}
		if !utf8.ValidString(s.Text()) {
			t.Errorf("invalid UTF-8 text")
		}
	})
}
