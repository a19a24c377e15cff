package e2b

import (
	"crypto/rand"
	"encoding/hex"
	"strings"

	"github.com/corralhq/corral/sandbox"
)

// NewSandboxID returns a fresh E2B sandbox id: "i" and 19 lowercase hex
// digits, a DNS label for the host form ({port}-{id}.{domain}) and a
// valid Corral sandbox id.
func NewSandboxID() string {
	return "i" + randomHex(10)[:19]
}

// NewAPIKey returns a fresh API key in the shape the E2B SDKs accept:
// "e2b_" and 40 lowercase hex digits.
func NewAPIKey() string {
	return "e2b_" + randomHex(20)
}

// newAccessToken returns a fresh access token for a sandbox of tenant:
// the tenant's name, a dot (which tenant names cannot hold) and 64 hex
// digits. Sandbox traffic carries no API key: the token's prefix names
// the tenant, and the node that owns the sandbox compares the whole.
func newAccessToken(tenant string) string {
	return tenant + "." + randomHex(32)
}

// tokenTenant returns the tenant a token names, if it is of the shape
// newAccessToken makes.
func tokenTenant(token string) (string, bool) {
	tenant, secret, ok := strings.Cut(token, ".")
	if !ok || tenant == "" || secret == "" {
		return "", false
	}
	return tenant, true
}

func randomHex(n int) string {
	b := make([]byte, n)
	// crypto/rand.Read never fails (it crashes the program instead).
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// templateRequest maps an E2B template to the sandbox it makes: base to
// a python sandbox on the server's default python image (its warm pool
// serves it); code-interpreter(-v1) to the python image (pandas,
// matplotlib: what its users run; `corral image build python` makes it);
// any other name to the Corral image of that name (an unknown one is
// refused by the engine).
func templateRequest(template string) sandbox.CreateSandboxRequest {
	switch template {
	case "base":
		return sandbox.CreateSandboxRequest{Language: "python"}
	case "code-interpreter", "code-interpreter-v1":
		return sandbox.CreateSandboxRequest{Language: "python", Image: codeInterpreterImage}
	}
	return sandbox.CreateSandboxRequest{Image: template}
}

// codeInterpreterImage is the image of the code-interpreter templates.
const codeInterpreterImage = "python"
