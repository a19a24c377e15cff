package blobtest

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/blob"
)

// bufferingStore reads a whole object into memory before keeping it: the
// mistake MeasurePut exists to catch.
type bufferingStore struct{ kept []byte }

func (b *bufferingStore) Put(ctx context.Context, key string, r io.Reader, size int64, ct string) (blob.Object, error) {
	data, err := io.ReadAll(r)
	b.kept = data
	return blob.Object{Key: key, Size: int64(len(data))}, err
}
func (b *bufferingStore) Get(context.Context, string) (io.ReadCloser, blob.Object, error) {
	return io.NopCloser(bytes.NewReader(b.kept)), blob.Object{}, nil
}
func (*bufferingStore) Stat(context.Context, string) (blob.Object, error) { return blob.Object{}, nil }
func (*bufferingStore) Delete(context.Context, string) error              { return nil }
func (*bufferingStore) DeletePrefix(context.Context, string) error        { return nil }
func (*bufferingStore) List(context.Context, string) ([]blob.Object, error) {
	return nil, nil
}
func (*bufferingStore) SignedURL(context.Context, string, time.Duration) (string, time.Time, error) {
	return "", time.Time{}, nil
}
func (*bufferingStore) Close() error { return nil }

var _ blob.Store = (*bufferingStore)(nil)

// TestMeasurePutCatchesBuffering: the memory check is not vacuous.
func TestMeasurePutCatchesBuffering(t *testing.T) {
	if testing.Short() {
		t.Skip("generates 256 MiB")
	}
	s := &bufferingStore{}
	_, growth, _, err := MeasurePut(t.Context(), s, "k", false)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("buffering store: %v", growth)
	if growth.InUse < LargeSize {
		t.Errorf("a store holding all %d MiB measured as %v", LargeSize/MiB, growth)
	}
}
