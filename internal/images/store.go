package images

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/fault"
	"golang.org/x/sys/unix"
)

// DefaultBudget is the disk space built and imported images may use
// together unless configured otherwise.
const DefaultBudget int64 = 20 << 30

// ErrNotFound is an image name this server does not have.
var ErrNotFound = fault.New(fault.NotFound, "no such image")

// Config configures a Store.
type Config struct {
	// Dir holds the images (DATA-DIR/images).
	Dir string
	// UID and GID are the sandbox user.
	UID, GID int
	// Budget caps the disk space of built and imported images; 0 means
	// DefaultBudget. The host image uses none.
	Budget int64
	// Defaults maps a language to the image its executions use when a
	// request names none; languages not listed use the host image.
	Defaults map[string]string
	Log      *slog.Logger
}

// Store keeps images under a directory and resolves names to them. Several
// processes may share one directory (corral serve and corral image): what
// must be atomic across them is guarded by file locks.
//
// Layout of Dir:
//
//	host/                  the built-in image
//	names/NAME.json        a name → a version, with where it came from
//	versions/HEX/          one image version, HEX its digest:
//	    rootfs/            the root filesystem, read-only to sandboxes
//	    image.json         digest, size, environment
//	    modules.json       the module index (which imports work)
//	    packages.txt       Debian packages installed (built images)
//	    npm-lock.json      what npm resolved (built images with npm)
//	    lock               shared-locked while a sandbox runs on the
//	                       version; its mtime is when it was last used
//	logs/NAME.log          the last build's log
//	tmp/stage-*            builds and imports in progress (stage.go)
//	tmp/trash-*            versions being removed (evict.go)
//	tmp/build-NAME.lock    held while NAME is built or imported
//	store.lock             held while names and versions change
//
// A Store is safe for concurrent use.
type Store struct {
	cfg Config

	mu      sync.Mutex
	host    *Image
	hostIdx ModuleIndex
	// indexes caches module indexes by version.
	indexes map[string]ModuleIndex
}

// New returns a store over cfg.Dir; nothing is read or created until used.
func New(cfg Config) *Store {
	if cfg.Budget <= 0 {
		cfg.Budget = DefaultBudget
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Store{cfg: cfg, indexes: map[string]ModuleIndex{}}
}

// NewStore keeps images under dir with the default budget and the host
// image for every language; uid and gid are the sandbox user.
func NewStore(dir string, uid, gid int) *Store {
	return New(Config{Dir: dir, UID: uid, GID: gid})
}

// Budget is the disk space images may use.
func (s *Store) Budget() int64 { return s.cfg.Budget }

// record is names/NAME.json.
type record struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	// Source is "recipe" or "import"; RecipeHash identifies the recipe a
	// built image came from; Origin is an imported image's file or tag.
	Source     string    `json:"source"`
	RecipeHash string    `json:"recipe_hash,omitempty"`
	Origin     string    `json:"origin,omitempty"`
	Created    time.Time `json:"created"`
}

// meta is versions/HEX/image.json.
type meta struct {
	Digest string   `json:"digest"`
	Size   int64    `json:"size"`
	Env    []string `json:"env,omitempty"`
}

// Info describes a stored image.
type Info struct {
	Name    string    `json:"name"`
	Source  string    `json:"source"`
	Origin  string    `json:"origin,omitempty"`
	Digest  string    `json:"digest"`
	Size    int64     `json:"size"`
	Created time.Time `json:"created"`
	// LastUsed is when a sandbox last started on it (or when it was
	// installed); it survives restarts.
	LastUsed time.Time `json:"last_used"`
	InUse    bool      `json:"in_use"`
	Rootfs   string    `json:"rootfs"`
	// Cached: a build found the image up to date and did nothing.
	Cached bool `json:"cached,omitempty"`
	// Evicted names the images removed to make room for this one.
	Evicted []string `json:"evicted,omitempty"`
}

func (s *Store) path(elem ...string) string {
	return filepath.Join(append([]string{s.cfg.Dir}, elem...)...)
}

func (s *Store) versionDir(v string) string { return s.path("versions", v) }

// recordPath is where name's record is.
func (s *Store) recordPath(name string) string { return s.path("names", name+".json") }

// LogPath is where a build of name writes its log.
func (s *Store) LogPath(name string) string { return s.path("logs", name+".log") }

// DefaultImage returns the image for a language's executions that name
// none.
func (s *Store) DefaultImage(language string) string {
	if n, ok := s.cfg.Defaults[language]; ok && n != "" {
		return n
	}
	return HostName
}

// Resolve returns the named image, preparing the host image on first use.
func (s *Store) Resolve(name string) (Image, error) {
	if name == HostName {
		return s.resolveHost()
	}
	rec, err := s.record(name)
	if err != nil {
		return Image{}, err
	}
	m, err := readMeta(s.versionDir(rec.Version))
	if err != nil {
		return Image{}, fmt.Errorf("image %s: %w", name, err)
	}
	return Image{Name: name, Rootfs: filepath.Join(s.versionDir(rec.Version), "rootfs"), Digest: m.Digest, Env: m.Env}, nil
}

func (s *Store) resolveHost() (Image, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.host != nil {
		return *s.host, nil
	}
	img, err := Host(s.path(HostName), s.cfg.UID, s.cfg.GID)
	if err != nil {
		return Image{}, fmt.Errorf("prepare image %s: %w", HostName, err)
	}
	s.host = &img
	return img, nil
}

func (s *Store) record(name string) (record, error) {
	notFound := fmt.Errorf("%w %q on this server; corral image build or corral image import makes one", ErrNotFound, name)
	if CheckName(name) != nil {
		return record{}, notFound
	}
	b, err := os.ReadFile(s.recordPath(name))
	if errors.Is(err, os.ErrNotExist) {
		return record{}, notFound
	}
	if err != nil {
		return record{}, fmt.Errorf("read image %s: %w", name, err)
	}
	var rec record
	if err := json.Unmarshal(b, &rec); err != nil || rec.Version == "" {
		return record{}, fmt.Errorf("read image %s: corrupt record %s", name, s.recordPath(name))
	}
	return rec, nil
}

func (s *Store) records() ([]record, error) {
	entries, err := os.ReadDir(s.path("names"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list images: %w", err)
	}
	var out []record
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok {
			continue
		}
		rec, err := s.record(name)
		if err != nil {
			s.cfg.Log.Warn("skip unreadable image record", "image", name, "err", err)
			continue
		}
		out = append(out, rec)
	}
	return out, nil
}

func readMeta(vdir string) (meta, error) {
	var m meta
	b, err := os.ReadFile(filepath.Join(vdir, "image.json"))
	if err != nil {
		return m, fmt.Errorf("read image metadata: %w", err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("read image metadata %s: %w", vdir, err)
	}
	return m, nil
}

// List describes the stored images (not the host image), by name.
func (s *Store) List() ([]Info, error) {
	recs, err := s.records()
	if err != nil {
		return nil, err
	}
	var out []Info
	for _, rec := range recs {
		out = append(out, s.info(rec))
	}
	slices.SortFunc(out, func(a, b Info) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func (s *Store) info(rec record) Info {
	m, _ := readMeta(s.versionDir(rec.Version))
	return Info{Name: rec.Name, Source: rec.Source, Origin: rec.Origin, Digest: m.Digest, Size: m.Size,
		Created: rec.Created, LastUsed: s.lastUsed(rec.Version), InUse: s.inUse(rec.Version),
		Rootfs: filepath.Join(s.versionDir(rec.Version), "rootfs")}
}

// lockStore takes the store-wide lock that orders changes to names and
// versions across processes.
func (s *Store) lockStore() (func(), error) {
	if err := s.makeDirs(); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(s.path("store.lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open image store lock: %w", err)
	}
	if err := flock(f, unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock image store: %w", err)
	}
	return func() { f.Close() }, nil
}

// makeDirs creates the store's directories that are missing.
func (s *Store) makeDirs() error {
	for _, d := range []string{"names", "versions", "tmp", "logs"} {
		if err := os.MkdirAll(s.path(d), 0o755); err != nil {
			return fmt.Errorf("create image store: %w", err)
		}
	}
	return nil
}

// writeFileAtomic replaces p with data through a rename, so readers see the
// old or the new content and never a part.
func writeFileAtomic(p string, data []byte, mode os.FileMode) error {
	tmp := p + ".tmp-" + randomHex()
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

func randomHex() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
