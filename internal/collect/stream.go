// Package collect turns what a sandbox produced into the execution record:
// output streams kept as head and tail with exact totals in bounded memory,
// and the verdict decided from kernel facts.
package collect

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// DefaultKeep is how much of each end of a stream is kept.
const DefaultKeep = 64 << 10

// Stream keeps the first and last keep bytes of an output stream and counts
// all of it. Memory stays under 3×keep whatever the volume. It is not safe
// for concurrent use.
type Stream struct {
	keep  int
	head  []byte
	tail  []byte // the last bytes after head; trimmed to keep when it doubles
	total int64
	lines int64
	last  byte
}

// NewStream returns a stream keeping keep bytes at each end.
func NewStream(keep int) *Stream {
	if keep <= 0 {
		keep = DefaultKeep
	}
	return &Stream{keep: keep}
}

// Write records p. It never fails.
func (s *Stream) Write(p []byte) (int, error) {
	n := len(p)
	if n == 0 {
		return 0, nil
	}
	s.total += int64(n)
	for _, b := range p {
		if b == '\n' {
			s.lines++
		}
	}
	s.last = p[n-1]
	if room := s.keep - len(s.head); room > 0 {
		k := min(room, len(p))
		s.head = append(s.head, p[:k]...)
		p = p[k:]
	}
	if len(p) == 0 {
		return n, nil
	}
	if len(p) >= s.keep {
		s.tail = append(s.tail[:0], p[len(p)-s.keep:]...)
		return n, nil
	}
	s.tail = append(s.tail, p...)
	if len(s.tail) >= 2*s.keep {
		s.tail = append(s.tail[:0], s.tail[len(s.tail)-s.keep:]...)
	}
	return n, nil
}

// Bytes is the exact number of bytes written.
func (s *Stream) Bytes() int64 { return s.total }

// Lines is the exact number of lines written; a last line without a newline
// counts.
func (s *Stream) Lines() int64 {
	if s.total > 0 && s.last != '\n' {
		return s.lines + 1
	}
	return s.lines
}

// Truncated reports whether bytes were dropped between head and tail.
func (s *Stream) Truncated() bool {
	return s.total > int64(len(s.head)+min(len(s.tail), s.keep))
}

// Text returns the kept output as valid UTF-8: everything when nothing was
// dropped, else the head, a marker saying how much is missing, and the tail.
// Invalid bytes become U+FFFD.
func (s *Stream) Text() string {
	tail := s.tail
	if len(tail) > s.keep {
		tail = tail[len(tail)-s.keep:]
	}
	if !s.Truncated() {
		return strings.ToValidUTF8(string(s.head)+string(tail), "\uFFFD")
	}
	head := trimIncompleteEnd(s.head)
	tail = trimIncompleteStart(tail)
	omitted := s.total - int64(len(head)) - int64(len(tail))
	return strings.ToValidUTF8(string(head), "\uFFFD") +
		fmt.Sprintf("\n[… %d bytes omitted …]\n", omitted) +
		strings.ToValidUTF8(string(tail), "\uFFFD")
}

// trimIncompleteEnd drops a UTF-8 sequence cut at the end of b.
func trimIncompleteEnd(b []byte) []byte {
	for i := 1; i <= utf8.UTFMax && i <= len(b); i++ {
		c := b[len(b)-i]
		if c < 0x80 {
			return b // ASCII: nothing cut
		}
		if utf8.RuneStart(c) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return b[:len(b)-i]
			}
			return b
		}
	}
	return b
}

// trimIncompleteStart drops continuation bytes at the start of b.
func trimIncompleteStart(b []byte) []byte {
	for i := 0; i < utf8.UTFMax && i < len(b); i++ {
		if utf8.RuneStart(b[i]) {
			return b[i:]
		}
	}
	return b
}
