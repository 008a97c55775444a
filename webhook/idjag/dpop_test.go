package idjag_test

import (
	"crypto/ecdsa"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/mcp/dpop"
	"latchkey.dev/latchkey/test/stack"
	"latchkey.dev/latchkey/webhook/idjag"
)

// tokenAt posts form to base's token endpoint with Basic authentication and a DPoP header when
// proof is not "".
func tokenAt(h *stack.IDJAG, base string, form url.Values, user, pass, proof string) stack.Answer {
	h.T.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/token", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(url.QueryEscape(user), url.QueryEscape(pass))
	if proof != "" {
		req.Header.Set("DPoP", proof)
	}
	return h.Send(req)
}

// dpopProof signs a proof for a POST to base's token endpoint on the stack's clock.
func dpopProof(h *stack.IDJAG, k *ecdsa.PrivateKey, base string) string {
	h.T.Helper()
	p, err := dpop.Sign(k, dpop.Claims{Method: http.MethodPost, URL: base + "/token", IssuedAt: h.Clock.Now()})
	if err != nil {
		h.T.Fatal(err)
	}
	return p
}

// TestIDJAGDPoP: both directions of ID-JAG keep DPoP (RFC 9449). A copied DPoP-bound access
// token does not buy an ID-JAG without a proof by its key; an ID-JAG redeemed with a proof
// gives a bound access token, and a Project that requires proofs refuses a redemption without
// one.
func TestIDJAGDPoP(t *testing.T) {
	t.Parallel()
	s := newIDJAG(t)
	key, thief := stack.NewECKey(t), stack.NewECKey(t)
	jkt, _ := dpop.Thumbprint(key)

	// The web app's access token, bound to its key: a confidential client's refresh with a proof
	// binds what it issues.
	res := s.CodeFlowAs(s.Browser(), "web", stack.WebSecret, "openid", "alice@example.com", stack.AlicePassword)
	r := tokenAt(s, s.Issuer, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {res.Str("refresh_token")}}, "web", stack.WebSecret, dpopProof(s, key, s.Issuer))
	if r.Status != http.StatusOK || r.Str("token_type") != "DPoP" {
		t.Fatalf("binding refresh: %d %s", r.Status, r.Raw)
	}
	bound := r.Str("access_token")
	ask := url.Values{
		"grant_type": {exchangeType}, "requested_token_type": {idjag.TokenTypeIDJAG},
		"subject_token": {bound}, "subject_token_type": {idjag.TokenTypeAccessToken},
		"audience": {s.ToolsIssuer}, "resource": {stack.ToolsResource}, "scope": {"repos:read"},
	}

	t.Run("a stolen bound token does not buy an ID-JAG", func(t *testing.T) {
		for name, proof := range map[string]string{"without a proof": "", "with the thief's key": dpopProof(s, thief, s.Issuer)} {
			x := tokenAt(s, s.Issuer, ask, "web", stack.WebSecret, proof)
			if x.Status != http.StatusBadRequest || x.Str("error") != "invalid_grant" || x.Str("access_token") != "" {
				t.Errorf("%s: %d %s, want invalid_grant", name, x.Status, x.Raw)
			}
		}
		recs, err := s.Store().ListAudit(t.Context(), stack.ProjectKey, 100)
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
	x := tokenAt(s, s.Issuer, ask, "web", stack.WebSecret, dpopProof(s, key, s.Issuer))
	if x.Status != http.StatusOK || x.Str("issued_token_type") != idjag.TokenTypeIDJAG {
		t.Fatalf("the holder's exchange: %d %s", x.Status, x.Raw)
	}
	redeem := func(jag string) url.Values {
		return url.Values{"grant_type": {idjag.GrantJWTBearer}, "assertion": {jag}}
	}

	t.Run("redeemed with a proof, the access token is bound", func(t *testing.T) {
		r := tokenAt(s, s.ToolsIssuer, redeem(x.Str("access_token")), "agent", stack.ToolsSecret, dpopProof(s, key, s.ToolsIssuer))
		if r.Status != http.StatusOK || r.Str("token_type") != "DPoP" {
			t.Fatalf("redemption with a proof: %d %s", r.Status, r.Raw)
		}
		in := s.ToolsIntrospect(r.Str("access_token"))
		if cnf, _ := in.Body["cnf"].(map[string]any); cnf["jkt"] != jkt || in.Body["token_type"] != "DPoP" {
			t.Fatalf("introspection: %s, want cnf.jkt %s", in.Raw, jkt)
		}
	})

	t.Run("required", func(t *testing.T) {
		tools := *s.Tools
		tools.RequireDPoP = true
		s.Tools = &tools
		s.Publish()
		defer func() { tools.RequireDPoP = false; s.Publish() }()
		a := s.Assertion(nil)
		if r := tokenAt(s, s.ToolsIssuer, redeem(a), "agent", stack.ToolsSecret, ""); r.Status != http.StatusBadRequest || r.Str("error") != "invalid_dpop_proof" {
			t.Fatalf("redemption without a proof where the Project requires one: %d %s", r.Status, r.Raw)
		}
		// The refusal did not spend the assertion.
		if r := tokenAt(s, s.ToolsIssuer, redeem(a), "agent", stack.ToolsSecret, dpopProof(s, key, s.ToolsIssuer)); r.Status != http.StatusOK || r.Str("token_type") != "DPoP" {
			t.Fatalf("redemption with a proof: %d %s", r.Status, r.Raw)
		}
	})
}
