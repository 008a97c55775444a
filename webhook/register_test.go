package webhook_test

import (
	"net/http"
	"strings"
)

// jsonReq is left for the tests of this package still to move beside their flow (they use
// test/stack's SendJSON once moved); it goes with harness_test.go.
func (h *harness) jsonReq(method, u, bearer, body string) tokenResult {
	h.t.Helper()
	req, _ := http.NewRequest(method, u, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	return h.send(req)
}
