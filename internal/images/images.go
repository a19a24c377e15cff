// Package images provides the root filesystems sandboxes run on: the
// built-in host image, images built from Debian packages by recipe
// (mmdebstrap), and images imported from docker save or OCI layout
// archives; a store that names them, knows which are in use, and evicts
// the least recently used to stay within a disk budget; and each image's
// module index (which imports work in it).
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
