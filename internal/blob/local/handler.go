package local

import (
	"crypto/hmac"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/corralhq/corral/internal/blob"
)

// Handler serves the links SignedURL makes: GET and HEAD of
// PathPrefix+<escaped key>?expires=&sig=. Mount it at PathPrefix without
// stripping the prefix; it needs no other authentication, the signature
// is the authorization. A link whose key, expiry or signature was changed,
// that lacks one, or that has expired is answered 403; a valid link to a
// missing object 404. Errors are JSON: {"error":{"code":...,"message":...}}.
// Downloads carry blob.DownloadHeaders and support Range requests.
func (s *Store) Handler() http.Handler { return http.HandlerFunc(s.serve) }

func (s *Store) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "a download link answers GET and HEAD only")
		return
	}
	key, msg := s.verify(r.URL)
	if msg != "" {
		writeError(w, http.StatusForbidden, "forbidden", msg)
		return
	}
	f, obj, err := s.open(key)
	if errors.Is(err, blob.ErrNotFound) {
		writeError(w, http.StatusNotFound, "not_found", "the file behind this link no longer exists")
		return
	}
	if err != nil {
		s.log.Error("serve blob", "key", key, "err", err)
		writeError(w, http.StatusInternalServerError, "internal", "internal error; retry")
		return
	}
	defer f.Close()
	blob.DownloadHeaders(w.Header(), obj)
	http.ServeContent(w, r, "", obj.ModTime, f)
}

// verify returns the key a link names, or why the link is refused.
func (s *Store) verify(u *url.URL) (key, refusal string) {
	const tampered = "this download link is invalid; ask for a new one"
	rest, ok := strings.CutPrefix(u.EscapedPath(), PathPrefix)
	if !ok {
		return "", tampered
	}
	key, err := url.PathUnescape(rest)
	if err != nil || blob.ValidateKey(key) != nil {
		return "", tampered
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return "", tampered
	}
	expires, sig := q.Get("expires"), q.Get("sig")
	if expires == "" || sig == "" || len(q["expires"]) != 1 || len(q["sig"]) != 1 {
		return "", "this download link is not signed; ask for a new one"
	}
	exp, err := strconv.ParseInt(expires, 10, 64)
	if err != nil || strconv.FormatInt(exp, 10) != expires {
		return "", tampered
	}
	// Compared as the lowercase hex SignedURL writes, so no other spelling
	// of the same signature opens the link.
	if !hmac.Equal([]byte(sig), []byte(hex.EncodeToString(s.sign(key, expires)))) {
		return "", tampered
	}
	if s.now().Unix() >= exp {
		return "", "this download link has expired; ask for a new one"
	}
	return key, ""
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": code, "message": msg}})
}
