package webhook_test

import (
	"crypto/ecdsa"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/mcp/dpop"
	"latchkey.dev/latchkey/webhook/idjag"
)

// tokenAt posts form to base's token endpoint with Basic authentication and a DPoP header when
// proof is not "".
func (h *harness) tokenAt(base string, form url.Values, user, pass, proof string) tokenResult {
	h.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/token", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(url.QueryEscape(user), url.QueryEscape(pass))
	if proof != "" {
		req.Header.Set("DPoP", proof)
	}
	return h.send(req)
}

// dpopProof signs a proof for a POST to base's token endpoint on the harness clock.
func (h *harness) dpopProof(k *ecdsa.PrivateKey, base string) string {
	h.t.Helper()
	p, err := dpop.Sign(k, dpop.Claims{Method: http.MethodPost, URL: base + "/token", IssuedAt: h.clock.Now()})
	if err != nil {
		h.t.Fatal(err)
	}
	return p
}

// TestIDJAGDPoP: both directions of ID-JAG keep DPoP (RFC 9449). A copied DPoP-bound access
// token does not buy an ID-JAG without a proof by its key; an ID-JAG redeemed with a proof
// gives a bound access token, and a Project that requires proofs refuses a redemption without
// one.
func TestIDJAGDPoP(t *testing.T) {
	s := newIDJAGStack(t)
	key, thief := ecKey(t), ecKey(t)
	jkt, _ := dpop.Thumbprint(key)

	// The web app's access token, bound to its key: a confidential client's refresh with a proof
	// binds what it issues.
	res := s.codeFlow(s.browser(), "web", webSecret, "openid", "alice@example.com", alicePass)
	r := s.tokenAt(s.base, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {res.str("refresh_token")}}, "web", webSecret, s.dpopProof(key, s.base))
	if r.status != http.StatusOK || r.str("token_type") != "DPoP" {
		t.Fatalf("binding refresh: %d %s", r.status, r.raw)
	}
	bound := r.str("access_token")
	ask := url.Values{
		"grant_type": {exchangeType}, "requested_token_type": {idjag.TokenTypeIDJAG},
		"subject_token": {bound}, "subject_token_type": {idjag.TokenTypeAccessToken},
		"audience": {s.toolsBase}, "resource": {mcpResource}, "scope": {"repos:read"},
	}

	t.Run("a stolen bound token does not buy an ID-JAG", func(t *testing.T) {
		for name, proof := range map[string]string{"without a proof": "", "with the thief's key": s.dpopProof(thief, s.base)} {
			x := s.tokenAt(s.base, ask, "web", webSecret, proof)
			if x.status != http.StatusBadRequest || x.str("error") != "invalid_grant" || x.str("access_token") != "" {
				t.Errorf("%s: %d %s, want invalid_grant", name, x.status, x.raw)
			}
		}
		recs, err := s.store.ListAudit(t.Context(), projectKey, 100)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int{}
		for _, rec := range recs {
			if rec.Action == events.DPoPProofRefused && rec.ClientID == "web" {
				got[rec.Reason+"/"+rec.Details["proof"]]++
			}
		}
		if got["dpop_key_mismatch/none"] != 1 || got["dpop_key_mismatch/another_key"] != 1 {
			t.Errorf("dpop.proof_refused records: %v", got)
		}
	})

	// The holder, proving the key, gets the ID-JAG.
	x := s.tokenAt(s.base, ask, "web", webSecret, s.dpopProof(key, s.base))
	if x.status != http.StatusOK || x.str("issued_token_type") != idjag.TokenTypeIDJAG {
		t.Fatalf("the holder's exchange: %d %s", x.status, x.raw)
	}
	redeem := func(jag string) url.Values {
		return url.Values{"grant_type": {bearerGrant}, "assertion": {jag}}
	}

	t.Run("redeemed with a proof, the access token is bound", func(t *testing.T) {
		r := s.tokenAt(s.toolsBase, redeem(x.str("access_token")), "agent", agentSecret, s.dpopProof(key, s.toolsBase))
		if r.status != http.StatusOK || r.str("token_type") != "DPoP" {
			t.Fatalf("redemption with a proof: %d %s", r.status, r.raw)
		}
		in := s.toolsIntrospect(r.str("access_token"))
		if cnf, _ := in.json["cnf"].(map[string]any); cnf["jkt"] != jkt || in.json["token_type"] != "DPoP" {
			t.Fatalf("introspection: %s, want cnf.jkt %s", in.raw, jkt)
		}
	})

	t.Run("required", func(t *testing.T) {
		tools := *s.tools
		tools.RequireDPoP = true
		s.tools = &tools
		s.publish()
		defer func() { tools.RequireDPoP = false; s.publish() }()
		a := s.assertion(nil)
		if r := s.tokenAt(s.toolsBase, redeem(a), "agent", agentSecret, ""); r.status != http.StatusBadRequest || r.str("error") != "invalid_dpop_proof" {
			t.Fatalf("redemption without a proof where the Project requires one: %d %s", r.status, r.raw)
		}
		// The refusal did not spend the assertion.
		if r := s.tokenAt(s.toolsBase, redeem(a), "agent", agentSecret, s.dpopProof(key, s.toolsBase)); r.status != http.StatusOK || r.str("token_type") != "DPoP" {
			t.Fatalf("redemption with a proof: %d %s", r.status, r.raw)
		}
	})
}
