package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/internal/config"
	"github.com/corralhq/corral/internal/tlscert/certtest"
)

// TestDoctorSaysBeingBuilt: corral doctor reports a runsc being built as
// on its way, with its log, not as a failure.
func TestDoctorSaysBeingBuilt(t *testing.T) {
	dir := t.TempDir()
	lock := filepath.Join(dir, "runsc.lock")
	f, err := os.Create(lock)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buildLog := filepath.Join(dir, "runsc-v1.log")
	if err := os.WriteFile(buildLog, []byte("building\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	lc := config.Local{Runsc: filepath.Join(dir, "bin", "runsc"), RunscBuildLock: lock}

	if c := runscCheck(lc); c.ok || c.pending {
		t.Errorf("missing, no build: %+v, want a failure", c)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	c := runscCheck(lc)
	if !c.pending || !strings.Contains(c.info, "being built (see "+buildLog+")") {
		t.Errorf("while building: %+v", c)
	}
}

// TestDoctorTLS: corral doctor reports the listener certificate's expiry
// and names, and fails one that has expired, is not valid yet, or is no
// certificate.
func TestDoctorTLS(t *testing.T) {
	ca := certtest.NewCA(t)
	dir := t.TempDir()
	notAfter := time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)
	file := filepath.Join(dir, "tls.crt")
	pair := ca.Issue(t, "sandbox.test", notAfter)
	certtest.WriteFile(t, file, append(append([]byte{}, pair.Cert...), ca.PEM...))
	now := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name string
		now  time.Time
		ok   bool
		info string
	}{
		{"valid", now, true, "expires 2031-03-04T05:06:07Z, in 62 days"},
		{"due", notAfter.Add(-72 * time.Hour), true, "in 3 days; renew it soon"},
		{"expired", notAfter.Add(time.Second), false, "expired 2031-03-04T05:06:07Z"},
		{"not yet", time.Now().Add(-48 * time.Hour), false, "is not valid before"},
	} {
		got := tlsCheck(file, c.now)
		if got.ok != c.ok || !strings.Contains(got.info, c.info) || !strings.Contains(got.info, "*.sandbox.test") {
			t.Errorf("%s: %+v, want ok %v and %q", c.name, got, c.ok, c.info)
		}
	}
	junk := filepath.Join(dir, "junk.crt")
	certtest.WriteFile(t, junk, []byte("junk"))
	if got := tlsCheck(junk, now); got.ok || !strings.Contains(got.info, "no PEM certificate") {
		t.Errorf("a file that holds no certificate: %+v", got)
	}
}
