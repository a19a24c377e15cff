package node

import (
	"context"
	"testing"
	"time"
)

// TestTurns: a session's turns go in the order they were taken, whatever
// order their waiters come in; one that leaves while waiting passes its
// place on; other sessions and executions without one never wait.
func TestTurns(t *testing.T) {
	var ts turns
	a1, a2, a3 := ts.take("t", "a"), ts.take("t", "a"), ts.take("t", "a")
	b1 := ts.take("t", "b")
	var none *turn = ts.take("t", "")
	ctx := t.Context()
	for _, tu := range []*turn{a1, b1, none} {
		if err := tu.wait(ctx); err != nil {
			t.Fatalf("a first turn waits: %v", err)
		}
	}
	ran := make(chan int, 3)
	go func() {
		if a3.wait(ctx) == nil {
			ran <- 3
		}
	}()
	go func() {
		if a2.wait(ctx) == nil {
			ran <- 2
			a2.done()
		}
	}()
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := a2.wait(short); err == nil {
		t.Fatal("the second turn went while the first ran")
	}
	a1.done()
	a1.done() // again: nothing
	if got := []int{<-ran, <-ran}; got[0] != 2 || got[1] != 3 {
		t.Errorf("turns ran %v, want [2 3]", got)
	}
	a3.done()
	// A turn that leaves while waiting lets the one after it go.
	c1, c2, c3 := ts.take("t", "c"), ts.take("t", "c"), ts.take("t", "c")
	c2.done()
	c1.done()
	if err := c3.wait(ctx); err != nil {
		t.Fatal(err)
	}
	c3.done()
	b1.done()
	if len(ts.q) != 0 {
		t.Errorf("lines left: %v", ts.q)
	}
}
