// Package tlscert owns the certificates of corral serve's listener: a
// Reloader serves a certificate and key pair from files an operator (or
// certbot, cert-manager) replaces in place, swapping in the new pair on a
// handshake once the files change and keeping the old one if the new pair
// does not load; Pool reads the CA bundle that nodes verify each other
// with; Leaf reads a certificate file's first certificate (its expiry, for
// corral doctor).
package tlscert

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"time"
)

// CheckInterval is how often, at most, a handshake looks at the files.
const CheckInterval = time.Second

// Reloader serves the pair in two files, reloaded when they change. It is
// safe for concurrent use.
type Reloader struct {
	certFile, keyFile string
	log               *slog.Logger
	now               func() time.Time

	mu sync.Mutex
	// cert is the pair served, loaded when the files were as loaded says.
	cert   *tls.Certificate
	loaded stamp
	// failed is the files' state the last failed load saw: logged once,
	// not tried again until the files change.
	failed  stamp
	checked time.Time
}

// stamp tells one state of the two files from another.
type stamp struct {
	cert, key fileStamp
	err       string // the files could not be read
}

type fileStamp struct {
	mod  time.Time
	size int64
	ino  uint64
}

// NewReloader loads the pair in certFile and keyFile (PEM), which must
// load now.
func NewReloader(certFile, keyFile string, log *slog.Logger) (*Reloader, error) {
	r := &Reloader{certFile: certFile, keyFile: keyFile, log: log, now: time.Now}
	st := r.stat()
	cert, err := load(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	r.cert, r.loaded, r.checked = cert, st, r.now()
	return r, nil
}

// GetCertificate is tls.Config's: the pair, reloaded first if the files
// changed since it was loaded (looked at once a second at most).
func (r *Reloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := r.now(); now.Sub(r.checked) >= CheckInterval {
		r.checked = now
		r.refresh()
	}
	return r.cert, nil
}

// Leaf is the certificate served now.
func (r *Reloader) Leaf() *x509.Certificate {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cert.Leaf
}

// ServerConfig is a server's TLS configuration serving r's pair.
func (r *Reloader) ServerConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.GetCertificate}
}

// refresh loads the files if they changed; a pair that does not load is
// logged once and the old one kept.
func (r *Reloader) refresh() {
	st := r.stat()
	if st == r.loaded || st == r.failed {
		return
	}
	var cert *tls.Certificate
	var err error
	if st.err != "" {
		err = errors.New(st.err)
	} else {
		cert, err = load(r.certFile, r.keyFile)
	}
	if err != nil {
		r.failed = st
		r.log.Warn("new TLS certificate not loaded; still serving the previous one", "cert", r.certFile, "key", r.keyFile,
			"not_after", r.cert.Leaf.NotAfter, "err", err)
		return
	}
	r.cert, r.loaded, r.failed = cert, st, stamp{}
	r.log.Info("TLS certificate reloaded", "cert", r.certFile, "subject", cert.Leaf.Subject.String(),
		"not_after", cert.Leaf.NotAfter)
}

func (r *Reloader) stat() stamp {
	var st stamp
	var errs []error
	for _, f := range []struct {
		path string
		into *fileStamp
	}{{r.certFile, &st.cert}, {r.keyFile, &st.key}} {
		fi, err := os.Stat(f.path)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		*f.into = fileStamp{mod: fi.ModTime(), size: fi.Size()}
		if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
			f.into.ino = sys.Ino
		}
	}
	if err := errors.Join(errs...); err != nil {
		st.err = err.Error()
	}
	return st
}

func load(certFile, keyFile string) (*tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("load TLS certificate %s and key %s: %w", certFile, keyFile, err)
	}
	return &cert, nil
}

// Pool reads a bundle of PEM certificates (the CAs nodes verify each
// other with).
func Pool(file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read CA bundle: %w", err)
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("CA bundle %s: no PEM certificate in it", file)
	}
	return p, nil
}

// Leaf reads the first certificate of a PEM file: the leaf of a chain.
func Leaf(file string) (*x509.Certificate, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read certificate: %w", err)
	}
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return nil, fmt.Errorf("certificate %s: no PEM certificate in it", file)
		}
		if blk.Type == "CERTIFICATE" {
			c, err := x509.ParseCertificate(blk.Bytes)
			if err != nil {
				return nil, fmt.Errorf("certificate %s: %w", file, err)
			}
			return c, nil
		}
	}
}
