// Package sdk runs the Go SDK (package sandbox) against a real corral serve:
// the usage snippets of docs/sdk.md (those of the article Corral started from) nearly verbatim, and the SDK's promises
// about errors, retries, ids and resumable streams.
package sdk

import (
	"testing"

	"github.com/corralhq/corral/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
