package main

import "errors"

// cleanup is a stack of undo steps (gVisor's pkg/cleanup): a start of
// many steps adds the undoing of each as it succeeds, and Clean runs them
// last first, whether a later step failed or the whole ran to its end.
// It is not safe for concurrent use.
type cleanup struct{ steps []func() error }

// Add pushes f.
func (c *cleanup) Add(f func() error) { c.steps = append(c.steps, f) }

// AddFunc pushes f, which cannot fail.
func (c *cleanup) AddFunc(f func()) { c.Add(func() error { f(); return nil }) }

// Clean runs the steps, last first, once each, and joins their errors.
func (c *cleanup) Clean() error {
	var errs []error
	for i := len(c.steps) - 1; i >= 0; i-- {
		errs = append(errs, c.steps[i]())
	}
	c.steps = nil
	return errors.Join(errs...)
}
