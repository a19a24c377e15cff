package oci

// Knows is Runtime.knows, for the tests.
func (r *Runtime) Knows(id string) bool { return r.knows(id) }

// SetCheckpointFlags replaces the flags of runsc checkpoint until the test
// ends.
func SetCheckpointFlags(t interface{ Cleanup(func()) }, flags []string) {
	old := checkpointFlags
	checkpointFlags = flags
	t.Cleanup(func() { checkpointFlags = old })
}

// TakeStartSlots takes every start slot until the returned func gives them
// back: a Create meanwhile waits.
func (r *Runtime) TakeStartSlots() (giveBack func()) {
	for range cap(r.starts) {
		r.starts <- struct{}{}
	}
	return func() {
		for range cap(r.starts) {
			<-r.starts
		}
	}
}
