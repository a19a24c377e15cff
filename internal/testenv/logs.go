package testenv

import (
	"bytes"
	"sync"
	"sync/atomic"
	"time"
)

// LogBuffer is a slog destination tests read. It is safe for concurrent
// use.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// Clock is a clock for a component under test: it moves only when told.
// It is safe for concurrent use.
type Clock struct{ ns atomic.Int64 }

// NewClock returns a clock at 2026-01-02 03:04:05 UTC.
func NewClock() *Clock {
	c := &Clock{}
	c.ns.Store(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano())
	return c
}

// Now is the clock's time.
func (c *Clock) Now() time.Time { return time.Unix(0, c.ns.Load()).UTC() }

// Advance moves the clock on by d.
func (c *Clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }
