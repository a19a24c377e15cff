package sandbox

import (
	"bytes"
	"errors"
	"net/http/httptest"
	"testing"
	"time"
)

func TestReadCallback(t *testing.T) {
	secret := []byte("s3cret")
	body := []byte(`{"execution_id":"ex_cb","status":"success","stdout":"hi\n"}`)
	req := httptest.NewRequest("POST", "/hook", bytes.NewReader(body))
	req.Header.Set(HeaderSignature, SignCallback(secret, time.Now(), body))
	res, err := ReadCallback(req, secret, 0)
	if err != nil || res.ExecutionID != "ex_cb" || res.Stdout != "hi\n" {
		t.Fatalf("ReadCallback: %+v, %v", res, err)
	}
	for name, mutate := range map[string]func(r *httptest.ResponseRecorder) ([]byte, string){
		"tampered": func(*httptest.ResponseRecorder) ([]byte, string) {
			return []byte(`{"execution_id":"ex_cb","status":"failed"}`), SignCallback(secret, time.Now(), body)
		},
		"wrong secret": func(*httptest.ResponseRecorder) ([]byte, string) {
			return body, SignCallback([]byte("other"), time.Now(), body)
		},
		"replayed": func(*httptest.ResponseRecorder) ([]byte, string) {
			return body, SignCallback(secret, time.Now().Add(-time.Hour), body)
		},
		"unsigned": func(*httptest.ResponseRecorder) ([]byte, string) { return body, "" },
	} {
		b, sig := mutate(nil)
		req := httptest.NewRequest("POST", "/hook", bytes.NewReader(b))
		req.Header.Set(HeaderSignature, sig)
		if _, err := ReadCallback(req, secret, 0); !errors.Is(err, ErrBadSignature) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
