package fakeoauth

import (
	"net/http"
)

// Salesforce, web server flow: the token answer carries instance_url, id (the identity URL),
// issued_at and signature, and no expires_in; a refresh token comes with the code answer
// (scope refresh_token) and a refresh answer has none (the one used is kept); errors are RFC
// 6749 bodies ("expired access/refresh token" for a dead refresh token); userinfo names the
// person by user_id and preferred_username; POST /services/oauth2/revoke with a form answers
// 200, and 400 {"error": "invalid_token"} for a token it does not know. Revoking a refresh
// token revokes its access tokens too.
//
//   - https://help.salesforce.com/s/articleView?id=xcloud.remoteaccess_oauth_web_server_flow.htm&type=5
//   - https://help.salesforce.com/s/articleView?id=xcloud.remoteaccess_using_userinfo_endpoint.htm&type=5
//   - https://developer.salesforce.com/docs/platform/mobile-sdk/guide/oauth-revoking-tokens.html
//
// Not confirmed there: the access token's lifetime (the org's session timeout; the fake's
// tokens last as long as a story says).
const Salesforce Shape = "salesforce"

func init() {
	register(&Provider{
		Shape:                Salesforce,
		Paths:                Paths{"/services/oauth2/authorize", "/services/oauth2/token", "/services/oauth2/userinfo", "/services/oauth2/revoke"},
		TokenPrefix:          "00DFAKE!",
		ClientAuth:           "post",
		AlwaysRefreshToken:   true,
		RevokeRefusesUnknown: true,
		Answer: func(is Issued, a Account) map[string]any {
			out := map[string]any{"access_token": is.Access, "signature": random(32), "scope": is.Scope,
				"instance_url": "https://fake.my.salesforce.com", "id": "https://login.salesforce.com/id/00DFAKE/" + a.ID,
				"token_type": "Bearer", "issued_at": "1733140800000"}
			if !is.Refreshed {
				out["refresh_token"] = is.Refresh
			}
			return out
		},
		TokenError: func(w http.ResponseWriter, code string, refresh bool) {
			desc := map[string]string{"invalid_grant": "expired access/refresh token", "invalid_client": "invalid client credentials"}[code]
			writeJSON(w, http.StatusBadRequest, map[string]any{"error": code, "error_description": desc})
		},
		UserInfo: func(w http.ResponseWriter, r *http.Request, req Request, a Account, ok bool) {
			if !ok {
				w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
				http.Error(w, "Bad_OAuth_Token", http.StatusForbidden)
				return
			}
			writeJSON(w, http.StatusOK, map[string]any{"sub": "https://login.salesforce.com/id/00DFAKE/" + a.ID, "user_id": a.ID,
				"organization_id": "00DFAKE", "preferred_username": a.Email, "email": a.Email, "name": a.Name})
		},
	})
}
