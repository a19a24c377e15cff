// Package httpbody reads request bodies for every wire that takes one
// (/v1, E2B's REST API, envd's /files, the code interpreter): capped, with
// their read errors made the client's faults (internal/fault) in one
// place, and JSON bodies decoded strictly: one value, nothing after it.
// A body that ends before its Content-Length, a broken chunked, gzip or
// multipart encoding, a connection that drops mid-body: each is an
// invalid argument (ErrIncomplete), never Corral's failure; a body over
// its cap is payload_too_large (ErrTooLarge). Each wire answers these
// faults through its own table.
package httpbody

import (
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/corralhq/corral/internal/fault"
)

// MaxFile caps one file a client uploads, and one write to a process's
// stdin, on every wire (/v1's session and sandbox files, envd's /files):
// the sandbox's disk caps it further.
const MaxFile = 1 << 30

var (
	// ErrIncomplete: the body could not be read to its end. The client
	// sent less than it declared, or closed the connection, or its
	// encoding is broken; what the reader said is wrapped, for the log.
	ErrIncomplete = fault.New(fault.InvalidArgument, "the request body could not be read to its end "+
		"(shorter than its Content-Length, or its chunked, gzip or multipart encoding is broken); send it whole")
	// ErrTooLarge: the body, or a file in it, is over the call's cap.
	ErrTooLarge = &fault.Error{Kind: fault.ResourceExhausted, Code: "payload_too_large",
		Message: "the request body is larger than this call accepts"}
)

// TooLarge is ErrTooLarge saying its cap, max bytes.
func TooLarge(max int64) *fault.Error {
	return ErrTooLarge.With("", "the request body is larger than %d bytes", max)
}

// Reader returns r's body capped at max bytes. Its read errors are faults
// (ErrIncomplete, ErrTooLarge); past the cap, net/http closes the
// connection after the answer, as http.MaxBytesReader does.
func Reader(w http.ResponseWriter, r *http.Request, max int64) io.Reader {
	return &client{rd: http.MaxBytesReader(w, r.Body, max), max: max}
}

// Limit returns what rd reads, capped at max bytes (max < 0: uncapped),
// with its read errors as Reader's: for readers of what a client sent
// that lie over its body (a decompressor, a part of a multipart body),
// whose own errors (a corrupt stream, a missing boundary) are the
// client's too.
func Limit(rd io.Reader, max int64) io.Reader {
	return &client{rd: rd, max: max, left: max, count: max >= 0}
}

// client reads what a client sent, its errors made faults once.
type client struct {
	rd  io.Reader
	max int64
	// count: the cap is counted here (Limit), in left, rather than by
	// http.MaxBytesReader.
	count bool
	left  int64
}

func (c *client) Read(p []byte) (int, error) {
	if c.count {
		if c.left < 0 {
			return 0, TooLarge(c.max)
		}
		// One byte past the cap tells a body over it from one at it.
		if int64(len(p)) > c.left+1 {
			p = p[:c.left+1]
		}
	}
	n, err := c.rd.Read(p)
	if c.count {
		c.left -= int64(n)
		if c.left < 0 {
			return n + int(c.left), TooLarge(c.max)
		}
	}
	// io.Reader's contract: EOF is returned bare, and compared so.
	if err == nil || err == io.EOF {
		return n, err
	}
	return n, Classify(err)
}

// Classify returns err, an error reading a request body, as the fault it
// is: a fault already (a reader below said), ErrTooLarge for
// http.MaxBytesReader's cap, else ErrIncomplete; each wraps err.
func Classify(err error) error {
	var f fault.Faulter
	var mbe *http.MaxBytesError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &f):
		return err
	case errors.As(err, &mbe):
		return fmt.Errorf("%w: %w", TooLarge(mbe.Limit), err)
	}
	return fmt.Errorf("%w: %w", ErrIncomplete, err)
}

// Read reads r's body whole, at most max bytes (Reader).
func Read(w http.ResponseWriter, r *http.Request, max int64) ([]byte, error) {
	return io.ReadAll(Reader(w, r, max))
}
