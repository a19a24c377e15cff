package images

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultBudget is the disk space built and imported images may use
// together unless configured otherwise.
const DefaultBudget int64 = 20 << 30

var (
	// ErrNotFound is an image name this server does not have.
	ErrNotFound = errors.New("no such image")
	// ErrNoRoom is a build or import that does not fit in the budget even
	// after evicting every image not in use.
	ErrNoRoom = errors.New("not enough room in the image budget")
)

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
//	    lock               shared-locked while a sandbox runs on the
//	                       version; its mtime is when it was last used
//	logs/NAME.log          the last build's log
//	tmp/                   builds and imports in progress, removals
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
	b, err := os.ReadFile(s.path("names", name+".json"))
	if errors.Is(err, os.ErrNotExist) {
		return record{}, notFound
	}
	if err != nil {
		return record{}, fmt.Errorf("read image %s: %w", name, err)
	}
	var rec record
	if err := json.Unmarshal(b, &rec); err != nil || rec.Version == "" {
		return record{}, fmt.Errorf("read image %s: corrupt record %s", name, s.path("names", name+".json"))
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

// Acquire marks img in use until release is called: eviction and removal
// leave it alone meanwhile, and its last-used time becomes now. It fails
// with ErrNotFound if the image was removed after it was resolved. The
// hold is a shared lock on the version's lock file, so it is seen by other
// processes and ends with the process.
func (s *Store) Acquire(img Image) (release func(), err error) {
	if img.Name == HostName {
		return func() {}, nil
	}
	vdir := filepath.Dir(img.Rootfs)
	if filepath.Dir(vdir) != s.path("versions") {
		return nil, fmt.Errorf("image %s: rootfs %s is not in this store", img.Name, img.Rootfs)
	}
	lock := filepath.Join(vdir, "lock")
	f, err := os.Open(lock)
	if err != nil {
		return nil, fmt.Errorf("%w: %s (%s) was removed after the execution was accepted", ErrNotFound, img.Name, img.Digest)
	}
	if err := flock(f, unix.LOCK_SH); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock image %s: %w", img.Name, err)
	}
	// A removal renames the version away while it holds the lock
	// exclusively: what we locked must still be the version's.
	if !sameFile(f, lock) {
		f.Close()
		return nil, fmt.Errorf("%w: %s (%s) was removed after the execution was accepted", ErrNotFound, img.Name, img.Digest)
	}
	now := time.Now()
	if err := os.Chtimes(lock, now, now); err != nil {
		s.cfg.Log.Warn("record image use", "image", img.Name, "err", err)
	}
	var once sync.Once
	return func() { once.Do(func() { f.Close() }) }, nil
}

func flock(f *os.File, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how)
		if err != unix.EINTR {
			return err
		}
	}
}

func sameFile(f *os.File, p string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Stat(p)
	return err == nil && os.SameFile(a, b)
}

// inUse reports whether a sandbox holds version v.
func (s *Store) inUse(v string) bool {
	f, err := os.Open(filepath.Join(s.versionDir(v), "lock"))
	if err != nil {
		return false
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return true
	}
	return false
}

func (s *Store) lastUsed(v string) time.Time {
	fi, err := os.Stat(filepath.Join(s.versionDir(v), "lock"))
	if err != nil {
		return time.Time{}
	}
	return fi.ModTime()
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

// Remove deletes the image name. Its files go at once unless a sandbox
// still runs on them; then they go at the next change to the store after
// it ends, and deferred is true.
func (s *Store) Remove(name string) (deferred bool, err error) {
	if name == HostName {
		return false, fmt.Errorf("image %s is built in and cannot be removed", HostName)
	}
	unlock, err := s.lockStore()
	if err != nil {
		return false, err
	}
	defer unlock()
	rec, err := s.record(name)
	if err != nil {
		return false, err
	}
	if err := os.Remove(s.path("names", name+".json")); err != nil {
		return false, fmt.Errorf("remove image %s: %w", name, err)
	}
	s.gc()
	_, err = os.Stat(s.versionDir(rec.Version))
	return err == nil, nil
}

// lockStore takes the store-wide lock that orders changes to names and
// versions across processes.
func (s *Store) lockStore() (func(), error) {
	for _, d := range []string{"names", "versions", "tmp", "logs"} {
		if err := os.MkdirAll(s.path(d), 0o755); err != nil {
			return nil, fmt.Errorf("create image store: %w", err)
		}
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

// gc removes versions no name refers to and that no sandbox holds, and
// what dead builds left in tmp/. The store lock must be held.
func (s *Store) gc() {
	recs, _ := s.records()
	ref := map[string]bool{}
	for _, r := range recs {
		ref[r.Version] = true
	}
	entries, _ := os.ReadDir(s.path("versions"))
	for _, e := range entries {
		if !ref[e.Name()] {
			if ok, err := s.removeVersion(e.Name()); err != nil {
				s.cfg.Log.Warn("remove unused image version", "version", e.Name(), "err", err)
			} else if ok {
				s.cfg.Log.Info("removed unused image version", "version", e.Name())
			}
		}
	}
	tmp, _ := os.ReadDir(s.path("tmp"))
	for _, e := range tmp {
		p := s.path("tmp", e.Name())
		if strings.HasPrefix(e.Name(), "trash-") {
			removeStage(p)
			continue
		}
		if !strings.HasPrefix(e.Name(), "stage-") {
			continue
		}
		// A stage's lock is held by its builder for as long as it lives.
		f, err := os.Open(filepath.Join(p, "lock"))
		if err != nil {
			if fi, serr := os.Stat(p); serr == nil && time.Since(fi.ModTime()) > time.Hour {
				removeStage(p)
			}
			continue
		}
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
			removeStage(p)
		}
		f.Close()
	}
}

// removeVersion deletes version v unless a sandbox holds it; it reports
// whether it did.
func (s *Store) removeVersion(v string) (bool, error) {
	vdir := s.versionDir(v)
	f, err := os.Open(filepath.Join(vdir, "lock"))
	if err == nil {
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			return false, nil
		}
	}
	trash := s.path("tmp", "trash-"+v+"-"+randomHex())
	err = os.Rename(vdir, trash)
	// An Acquire waiting on the lock finds the version gone at once
	// rather than after the removal below.
	if f != nil {
		f.Close()
	}
	if err != nil {
		return false, fmt.Errorf("remove image version %s: %w", v, err)
	}
	s.mu.Lock()
	delete(s.indexes, v)
	s.mu.Unlock()
	if err := os.RemoveAll(trash); err != nil {
		return true, fmt.Errorf("remove image version %s: %w", v, err)
	}
	return true, nil
}

func randomHex() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// stage is a build or import in progress: a directory in tmp/ shaped like
// a version, locked by its builder.
type stage struct {
	dir  string
	lock *os.File
}

func (s *Store) newStage() (*stage, error) {
	if err := os.MkdirAll(s.path("tmp"), 0o755); err != nil {
		return nil, fmt.Errorf("create image store: %w", err)
	}
	dir, err := os.MkdirTemp(s.path("tmp"), "stage-")
	if err != nil {
		return nil, fmt.Errorf("create stage: %w", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create stage: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err == nil {
		err = flock(f, unix.LOCK_EX)
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("lock stage: %w", err)
	}
	return &stage{dir: dir, lock: f}, nil
}

// discard removes what is left of the stage (nothing once installed).
func (st *stage) discard() {
	st.lock.Close()
	removeStage(st.dir)
}

// removeStage deletes a stage directory, first detaching anything a
// killed mmdebstrap left mounted in its chroot (/proc, /sys, /dev), so the
// removal never reaches into them.
func removeStage(dir string) {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	var mounts []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := unescapeMount(f[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			mounts = append(mounts, mp)
		}
	}
	// Deepest first.
	slices.SortFunc(mounts, func(a, b string) int { return len(b) - len(a) })
	for _, mp := range mounts {
		_ = unix.Unmount(mp, unix.MNT_DETACH)
	}
	os.RemoveAll(dir)
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// finish applies Corral's layout to the stage's rootfs, indexes its
// modules and computes its digest.
func (s *Store) finish(st *stage, env []string, progress func(string, float64)) (meta, error) {
	rootfs := filepath.Join(st.dir, "rootfs")
	progress("applying Corral's layout", 0.90)
	if err := applyLayout(rootfs, s.cfg.UID, s.cfg.GID); err != nil {
		return meta{}, fmt.Errorf("apply layout: %w", err)
	}
	progress("indexing modules", 0.92)
	idx, err := scanModules(rootfs, env)
	if err != nil {
		return meta{}, fmt.Errorf("index modules: %w", err)
	}
	if err := writeIndex(filepath.Join(st.dir, "modules.json"), idx); err != nil {
		return meta{}, fmt.Errorf("write module index: %w", err)
	}
	progress("computing digest", 0.94)
	digest, size, err := treeDigest(rootfs, env)
	if err != nil {
		return meta{}, err
	}
	m := meta{Digest: digest, Size: size, Env: env}
	b, _ := json.MarshalIndent(m, "", " ")
	if err := writeFileAtomic(filepath.Join(st.dir, "image.json"), append(b, '\n'), 0o644); err != nil {
		return meta{}, fmt.Errorf("write image metadata: %w", err)
	}
	return m, nil
}

// install makes the stage the version rec names, evicting least recently
// used images not in use if the budget needs room.
func (s *Store) install(st *stage, m meta, rec record) (Info, error) {
	unlock, err := s.lockStore()
	if err != nil {
		return Info{}, err
	}
	defer unlock()
	s.gc()
	rec.Version = strings.TrimPrefix(m.Digest, "sha256:")
	rec.Created = time.Now().UTC()
	evicted, err := s.makeRoom(rec.Name, rec.Version, m.Size)
	if err != nil {
		return Info{Evicted: evicted}, err
	}
	vdir := s.versionDir(rec.Version)
	if _, err := os.Stat(vdir); err == nil {
		st.discard() // the same content is already here
	} else {
		if err := os.Rename(st.dir, vdir); err != nil {
			return Info{}, fmt.Errorf("install image %s: %w", rec.Name, err)
		}
		st.lock.Close()
	}
	// A new image counts as just used, so the next eviction spares it.
	now := time.Now()
	_ = os.Chtimes(filepath.Join(vdir, "lock"), now, now)
	b, _ := json.MarshalIndent(rec, "", " ")
	if err := writeFileAtomic(s.path("names", rec.Name+".json"), append(b, '\n'), 0o644); err != nil {
		return Info{}, fmt.Errorf("install image %s: %w", rec.Name, err)
	}
	s.gc()
	info := s.info(rec)
	info.Evicted = evicted
	return info, nil
}

// makeRoom evicts least recently used images, other than name and those in
// use, until a version of size bytes fits in the budget. It evicts nothing
// if that cannot be enough. The store lock must be held.
func (s *Store) makeRoom(name, version string, size int64) ([]string, error) {
	recs, err := s.records()
	if err != nil {
		return nil, err
	}
	sizes := map[string]int64{}
	entries, _ := os.ReadDir(s.path("versions"))
	for _, e := range entries {
		m, _ := readMeta(s.versionDir(e.Name()))
		sizes[e.Name()] = m.Size
	}
	refs := map[string]int{}
	for _, r := range recs {
		refs[r.Version]++
	}
	var used int64
	for _, sz := range sizes {
		used += sz
	}
	need := size
	if _, ok := sizes[version]; ok {
		need = 0
	}
	// Replacing name frees its old version if nothing else holds it.
	for _, r := range recs {
		if r.Name == name && r.Version != version && refs[r.Version] == 1 && !s.inUse(r.Version) {
			used -= sizes[r.Version]
		}
	}
	if used+need <= s.cfg.Budget {
		return nil, nil
	}
	type cand struct {
		rec  record
		last time.Time
	}
	var cands []cand
	for _, r := range recs {
		if r.Name != name && r.Version != version && !s.inUse(r.Version) {
			cands = append(cands, cand{r, s.lastUsed(r.Version)})
		}
	}
	slices.SortFunc(cands, func(a, b cand) int {
		return cmp.Or(a.last.Compare(b.last), strings.Compare(a.rec.Name, b.rec.Name))
	})
	// Plan first: evict nothing unless evicting is enough.
	free, left := used, maps.Clone(refs)
	var plan []record
	for _, c := range cands {
		if free+need <= s.cfg.Budget {
			break
		}
		plan = append(plan, c.rec)
		if left[c.rec.Version]--; left[c.rec.Version] == 0 {
			free -= sizes[c.rec.Version]
		}
	}
	if free+need > s.cfg.Budget {
		return nil, fmt.Errorf("%w: %s needs %s; the budget is %s and images in use keep %s",
			ErrNoRoom, name, FormatSize(need), FormatSize(s.cfg.Budget), FormatSize(free))
	}
	var evicted []string
	for _, r := range plan {
		if err := os.Remove(s.path("names", r.Name+".json")); err != nil {
			return evicted, fmt.Errorf("evict image %s: %w", r.Name, err)
		}
		refs[r.Version]--
		if refs[r.Version] == 0 {
			if ok, err := s.removeVersion(r.Version); err != nil || !ok {
				// Acquired since the plan was made: its files stay until
				// it is released.
				s.cfg.Log.Warn("evicted image still in use; files kept until released", "image", r.Name, "err", err)
			}
		}
		s.cfg.Log.Info("evicted image", "image", r.Name, "size", sizes[r.Version], "for", name)
		evicted = append(evicted, r.Name)
	}
	return evicted, nil
}

// buildLock serialises builds and imports of one name across processes.
func (s *Store) buildLock(ctx context.Context, name string) (func(), error) {
	if err := os.MkdirAll(s.path("tmp"), 0o755); err != nil {
		return nil, fmt.Errorf("create image store: %w", err)
	}
	f, err := os.OpenFile(s.path("tmp", "build-"+name+".lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open build lock: %w", err)
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if err != unix.EWOULDBLOCK && err != unix.EINTR {
			f.Close()
			return nil, fmt.Errorf("lock build of %s: %w", name, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// ImagesWithModule lists the images (the host image among them) in which a
// program in language can import module, sorted by name.
func (s *Store) ImagesWithModule(language, module string) []string {
	var out []string
	if idx := s.hostIndex(); idx.Has(language, module) {
		out = append(out, HostName)
	}
	recs, _ := s.records()
	for _, r := range recs {
		if s.index(r.Version).Has(language, module) {
			out = append(out, r.Name)
		}
	}
	slices.Sort(out)
	return out
}

func (s *Store) index(v string) ModuleIndex {
	s.mu.Lock()
	idx, ok := s.indexes[v]
	s.mu.Unlock()
	if ok {
		return idx
	}
	idx, err := readIndex(filepath.Join(s.versionDir(v), "modules.json"))
	if err != nil {
		return nil
	}
	s.mu.Lock()
	s.indexes[v] = idx
	s.mu.Unlock()
	return idx
}

// hostIndex scans the host's /usr once: the host image runs the host's
// interpreters.
func (s *Store) hostIndex() ModuleIndex {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hostIdx == nil {
		idx, err := scanModules("/", nil)
		if err != nil {
			idx = ModuleIndex{}
		}
		s.hostIdx = idx
	}
	return s.hostIdx
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
