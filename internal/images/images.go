// Package images provides the root filesystems sandboxes run on: the
// built-in host image, and (later) images built from Debian packages or
// imported from OCI archives, with an LRU disk budget.
package images

import "github.com/corralhq/corral/internal/runtime"

// Image is a root filesystem ready for a sandbox.
type Image struct {
	Name   string
	Rootfs string
	// Mounts are read-only binds from the host (the host image's /usr).
	Mounts []runtime.Mount
	// Digest identifies the content, for the execution record.
	Digest string
	// Env is added to every program's environment (PATH additions).
	Env []string
}
