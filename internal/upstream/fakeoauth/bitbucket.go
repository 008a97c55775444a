package fakeoauth

import (
	"net/http"
	"strings"
)

// Bitbucket Cloud: the consumer's key and secret as HTTP Basic credentials at
// /site/oauth2/access_token; the token answer lists the granted "scopes" and says which
// grant produced it in "state"; access tokens last two hours and the refresh token is kept
// across refreshes; errors are RFC 6749 bodies; the account is the 2.0 API's /user, named by
// uuid (in braces) and username. No revocation endpoint.
//
//   - https://developer.atlassian.com/cloud/bitbucket/oauth-2/
//   - https://developer.atlassian.com/cloud/bitbucket/rest/api-group-users/#api-user-get
//
// Not confirmed there: that Bitbucket honours PKCE (the fake requires it, as Latchkey sends it
// to every provider; an authorization server ignores parameters it does not know), and that a
// refresh answer repeats the same refresh token (the fake repeats it).
const Bitbucket Shape = "bitbucket"

func init() {
	register(&Provider{
		Shape:       Bitbucket,
		Paths:       Paths{Authorize: "/site/oauth2/authorize", Token: "/site/oauth2/access_token", UserInfo: "/2.0/user"},
		TokenPrefix: "bbat-",
		ClientAuth:  "basic",
		AccountIDOf: func(a Account) string { return "{" + a.ID + "}" },
		Answer: func(is Issued, _ Account) map[string]any {
			state := "authorization_code"
			if is.Refreshed {
				state = "refresh_token"
			}
			return map[string]any{"access_token": is.Access, "scopes": strings.TrimSpace(is.Scope + " account"), "expires_in": is.ExpiresIn,
				"refresh_token": is.Refresh, "token_type": "bearer", "state": state}
		},
		TokenError: func(w http.ResponseWriter, code string, refresh bool) {
			status := http.StatusBadRequest
			if code == "invalid_client" {
				status = http.StatusUnauthorized
			}
			writeJSON(w, status, map[string]any{"error": code, "error_description": "Invalid request"})
		},
		UserInfo: func(w http.ResponseWriter, r *http.Request, req Request, a Account, ok bool) {
			if !ok {
				writeJSON(w, http.StatusUnauthorized, map[string]any{"type": "error", "error": map[string]any{"message": "Access token expired."}})
				return
			}
			writeJSON(w, http.StatusOK, map[string]any{"type": "user", "uuid": "{" + a.ID + "}", "account_id": "557058:" + a.ID,
				"username": a.Login, "display_name": a.Name, "nickname": a.Login})
		},
	})
}
