package admin_test

import (
	"net/http"
	"testing"

	"latchkey.dev/latchkey/internal/devcerts"
	"latchkey.dev/latchkey/webhook/admin"
)

// TestFrontProxyRotation: when the kube-apiserver's front-proxy CA rotates, the server takes
// the new CA without a restart. The attacker holds a client certificate of the CA rotated out
// (say the old CA's key leaked, which is why it was rotated): it is refused, on a new
// connection and on a connection the aggregator opened before the rotation, and the new
// CA's certificate is accepted.
func TestFrontProxyRotation(t *testing.T) {
	h := newHarness(t)
	user := map[string][]string{"X-Remote-User": {"ada"}}
	if code := h.doWith(h.proxy, "GET", base+"/namespaces/team-a/people", "", user, nil); code != 200 {
		t.Fatalf("before the rotation: %d", code)
	}
	rotated, err := devcerts.NewCA("front-proxy-ca-2")
	must(t, err)
	must(t, h.admin.SetFrontProxy(admin.FrontProxy{ClientCA: rotated.Pool(), AllowedNames: []string{"front-proxy-client"}}))

	// The connection opened before the rotation, with the old CA's certificate.
	if code := h.doWith(h.proxy, "GET", base+"/namespaces/team-a/people", "", user, nil); code != http.StatusUnauthorized {
		t.Fatalf("old CA's certificate on an open connection: %d, want 401", code)
	}
	// A new connection with the old CA's certificate: refused at the handshake or with a 401.
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, h.url+base+"/namespaces/team-a/people", nil)
	req.Header.Set("X-Remote-User", "ada")
	if resp, err := h.client(h.certs.serving, h.certs.proxyCA, "front-proxy-client").Do(req); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("old CA's certificate on a new connection: %d, want it refused", resp.StatusCode)
		}
	}
	if code := h.doWith(h.client(h.certs.serving, rotated, "front-proxy-client"), "GET", base+"/namespaces/team-a/people", "", user, nil); code != 200 {
		t.Fatalf("new CA's certificate: %d", code)
	}
	// The new CA with a name the aggregator does not use: refused as before.
	if code := h.doWith(h.client(h.certs.serving, rotated, "someone"), "GET", base+"/namespaces/team-a/people", "", user, nil); code != http.StatusUnauthorized {
		t.Fatalf("new CA, other name: %d", code)
	}
}
