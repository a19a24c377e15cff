package oci

// Knows is Runtime.knows, for the tests.
func (r *Runtime) Knows(id string) bool { return r.knows(id) }
