package oauth_test

import (
	"net/http"
	"net/url"
	"testing"

	"latchkey.dev/latchkey/test/stack"
)

// refusal is what spec.redirects.onlyRecognisedApps answers an app it refuses.
const refusal = "This organisation only allows recognised apps to connect"

// The policy holds wherever a refused client's tokens are used, at once, before any controller
// has revoked anything: refresh ends the family, introspection and userinfo say inactive, and
// codes or credentials issued before the switch yield nothing.
func TestPolicyAtUse(t *testing.T) {
	t.Parallel()
	s := stack.New(t, stack.Options{})
	b := s.Browser()
	website := "https://helper.example/cb"
	bad := s.MustRegister(`{"client_name":"Helper","redirect_uris":["` + website + `"],"token_endpoint_auth_method":"none","grant_types":["authorization_code","refresh_token"]}`)
	ok := s.MustRegister(`{"client_name":"CLI","redirect_uris":["http://127.0.0.1/cb"],"token_endpoint_auth_method":"none","grant_types":["authorization_code","refresh_token"]}`)
	flow := func(client, redirect string) stack.Answer {
		t.Helper()
		pk := stack.NewPKCE()
		loc, _ := b.MustAuthorizeAt(s.AuthorizeURL(client, redirect, "openid read", pk, nil), stack.AliceEmail, stack.AlicePassword)
		r := s.Token(url.Values{"grant_type": {"authorization_code"}, "client_id": {client}, "code": {loc.Query().Get("code")},
			"redirect_uri": {redirect}, "code_verifier": {pk.Verifier}}, "", "")
		if r.Status != http.StatusOK {
			t.Fatalf("code flow for %s: %d %s", client, r.Status, r.Raw)
		}
		return r
	}
	badTok, okTok := flow(bad, website), flow(ok, "http://127.0.0.1/cb")
	// A code issued before the switch, redeemed after.
	pk := stack.NewPKCE()
	loc, _ := b.MustAuthorizeAt(s.AuthorizeURL(bad, website, "read", pk, url.Values{"prompt": {"consent"}}), stack.AliceEmail, stack.AlicePassword)
	// A confidential registered client with a website redirect, using client credentials.
	r := s.Register(`{"redirect_uris":["` + website + `"],"grant_types":["authorization_code","client_credentials"]}`)
	ccID, ccSecret := r.Str("client_id"), r.Str("client_secret")

	s.OnlyRecognisedApps(true)
	if s.Active(badTok.Str("access_token")) || !s.Active(okTok.Str("access_token")) {
		t.Error("introspection must follow the policy at once")
	}
	if u := s.Userinfo(badTok.Str("access_token")); u.Status != http.StatusUnauthorized {
		t.Errorf("userinfo for a refused client: %d %s", u.Status, u.Raw)
	}
	if u := s.Userinfo(okTok.Str("access_token")); u.Status != http.StatusOK {
		t.Errorf("userinfo for an allowed client: %d %s", u.Status, u.Raw)
	}
	rr := s.Token(url.Values{"grant_type": {"refresh_token"}, "client_id": {bad}, "refresh_token": {badTok.Str("refresh_token")}}, "", "")
	if rr.Status != http.StatusBadRequest || rr.Str("error") != "invalid_grant" || rr.Str("error_description") != refusal || rr.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("refresh by a refused client: %d %s", rr.Status, rr.Raw)
	}
	if rr := s.Token(url.Values{"grant_type": {"refresh_token"}, "client_id": {ok}, "refresh_token": {okTok.Str("refresh_token")}}, "", ""); rr.Status != http.StatusOK {
		t.Errorf("refresh by an allowed client: %d %s", rr.Status, rr.Raw)
	}
	rc := s.Token(url.Values{"grant_type": {"authorization_code"}, "client_id": {bad}, "code": {loc.Query().Get("code")},
		"redirect_uri": {website}, "code_verifier": {pk.Verifier}}, "", "")
	if rc.Status != http.StatusBadRequest || rc.Str("error") != "invalid_grant" || rc.Str("error_description") != refusal {
		t.Errorf("code from before the switch: %d %s", rc.Status, rc.Raw)
	}
	if cc := s.Token(url.Values{"grant_type": {"client_credentials"}}, ccID, ccSecret); cc.Status != http.StatusBadRequest ||
		cc.Str("error") != "unauthorized_client" || cc.Str("error_description") != refusal {
		t.Errorf("client credentials: %d %s", cc.Status, cc.Raw)
	}

	// The refused refresh ended the token: relaxing the policy brings nothing back.
	s.OnlyRecognisedApps(false)
	if s.Active(badTok.Str("access_token")) {
		t.Error("the refused family's access token came back")
	}
	rr = s.Token(url.Values{"grant_type": {"refresh_token"}, "client_id": {bad}, "refresh_token": {badTok.Str("refresh_token")}}, "", "")
	if rr.Status != http.StatusBadRequest || rr.Str("error") != "invalid_grant" {
		t.Errorf("the refused refresh token works again: %d %s", rr.Status, rr.Raw)
	}
	if recs := s.AuditOf("refresh.refused"); len(recs) != 1 || recs[0].Details["client_id"] != bad {
		t.Errorf("audit: %+v", recs)
	}
}
