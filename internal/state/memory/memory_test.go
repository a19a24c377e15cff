package memory_test

import (
	"sync"
	"testing"

	"github.com/corralhq/corral/internal/state"
	"github.com/corralhq/corral/internal/state/memory"
	"github.com/corralhq/corral/internal/state/statetest"
)

func TestMain(m *testing.M) { statetest.Main(m) }

// TestState runs the conformance suite. Every node of a test shares one
// State, as every part of a single-node server does.
func TestState(t *testing.T) {
	var (
		mu     sync.Mutex
		byTest = map[*testing.T]*memory.State{}
	)
	statetest.Run(t, func(t *testing.T) state.State {
		mu.Lock()
		defer mu.Unlock()
		if s, ok := byTest[t]; ok {
			return s
		}
		s := memory.New(nil)
		byTest[t] = s
		t.Cleanup(func() {
			if err := s.Close(); err != nil {
				t.Error(err)
			}
			mu.Lock()
			delete(byTest, t)
			mu.Unlock()
		})
		return s
	})
}
