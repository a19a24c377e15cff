package sandbox

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Callback headers.
const (
	HeaderSignature  = "Corral-Signature"
	HeaderDeliveryID = "Corral-Delivery-Id"
	HeaderIdempotent = "Idempotency-Key"
)

// DefaultCallbackTolerance is how old a callback's timestamp may be.
const DefaultCallbackTolerance = 5 * time.Minute

// ErrBadSignature reports a callback whose signature does not verify.
var ErrBadSignature = errors.New("corral: bad callback signature")

// SignCallback returns the Corral-Signature header value for body sent at
// t: "t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>".
func SignCallback(secret []byte, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac(secret, ts, body))
}

func mac(secret []byte, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte("."))
	m.Write(body)
	return m.Sum(nil)
}

// VerifyCallback checks a callback's Corral-Signature header against its
// raw body: the HMAC must match and the timestamp must be within tolerance
// of now (0 means DefaultCallbackTolerance), which stops replays of old
// deliveries.
func VerifyCallback(secret []byte, header string, body []byte, tolerance time.Duration) error {
	if tolerance <= 0 {
		tolerance = DefaultCallbackTolerance
	}
	var ts string
	var sigs [][]byte
	for _, part := range strings.Split(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			continue
		}
		switch k {
		case "t":
			ts = v
		case "v1":
			if b, err := hex.DecodeString(v); err == nil {
				sigs = append(sigs, b)
			}
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return fmt.Errorf("%w: malformed header", ErrBadSignature)
	}
	if age := time.Since(time.Unix(sec, 0)); age > tolerance || age < -tolerance {
		return fmt.Errorf("%w: timestamp outside tolerance (%v)", ErrBadSignature, age.Round(time.Second))
	}
	want := mac(secret, ts, body)
	for _, s := range sigs {
		if hmac.Equal(s, want) {
			return nil
		}
	}
	return ErrBadSignature
}

// maxCallbackBytes caps the body ReadCallback accepts: a record holds at
// most 256 KiB of output per stream plus its metadata.
const maxCallbackBytes = 8 << 20

// ReadCallback reads an incoming callback request, verifies its
// Corral-Signature against secret (the tenant's callback secret) with
// VerifyCallback and the given tolerance (0: DefaultCallbackTolerance), and
// returns the execution record it carries. A receiver should answer 2xx
// only after it has kept the record, and treat the Idempotency-Key header
// (the execution id) as a de-duplication key: deliveries are retried until
// one is acknowledged, so the same record can arrive more than once.
func ReadCallback(r *http.Request, secret []byte, tolerance time.Duration) (*Result, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxCallbackBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read callback: %w", err)
	}
	if len(body) > maxCallbackBytes {
		return nil, fmt.Errorf("read callback: body larger than %d bytes", maxCallbackBytes)
	}
	if err := VerifyCallback(secret, r.Header.Get(HeaderSignature), body, tolerance); err != nil {
		return nil, err
	}
	var res Result
	if err := json.Unmarshal(body, &res); err != nil {
		return nil, fmt.Errorf("decode callback: %w", err)
	}
	return &res, nil
}
