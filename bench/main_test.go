package bench

import (
	"os"
	"testing"

	"github.com/corralhq/corral/internal/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.Cleanup()
	os.Exit(code)
}
