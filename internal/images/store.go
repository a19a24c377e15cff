package images

import (
	"fmt"
	"path/filepath"
	"sync"
)

// Store resolves image names to prepared root filesystems under a data
// directory. It is safe for concurrent use.
type Store struct {
	dir      string
	uid, gid int

	mu   sync.Mutex
	host *Image
}

// NewStore keeps images under dir; uid and gid are the sandbox user.
func NewStore(dir string, uid, gid int) *Store {
	return &Store{dir: dir, uid: uid, gid: gid}
}

// Resolve returns the named image, preparing the host image on first use.
func (s *Store) Resolve(name string) (Image, error) {
	if name != HostName {
		return Image{}, fmt.Errorf("image %q not found on this server", name)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.host != nil {
		return *s.host, nil
	}
	img, err := Host(filepath.Join(s.dir, HostName), s.uid, s.gid)
	if err != nil {
		return Image{}, fmt.Errorf("prepare image %s: %w", HostName, err)
	}
	s.host = &img
	return img, nil
}
