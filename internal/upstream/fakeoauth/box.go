package fakeoauth

import (
	"net/http"
)

// Box (OAuth 2.0 with user authentication): client credentials in the form; access tokens of
// an hour (expires_in 3600) with restricted_to; every refresh answers with a new refresh token
// and the one used stops working (single use); errors as RFC 6749 JSON with Box's
// error_description; the account from /2.0/users/me (id, login = the email); revocation of
// either token by POST /oauth2/revoke with the client's credentials, answered with an empty 200.
//
//   - https://developer.box.com/reference/post-oauth2-token/
//   - https://developer.box.com/guides/authentication/tokens/refresh/ (single use, 60 days)
//   - https://developer.box.com/reference/post-oauth2-revoke/
//   - https://developer.box.com/reference/get-users-me/
//
// Not confirmed there: whether Box honours PKCE (the fake requires it as every fake does), and
// the body of a 401 from the API (the fake sends none, with WWW-Authenticate).
const Box Shape = "box"

func init() {
	register(&Provider{
		Shape:          Box,
		Paths:          Paths{"/api/oauth2/authorize", "/oauth2/token", "/2.0/users/me", "/oauth2/revoke"},
		TokenPrefix:    "box-",
		ClientAuth:     "post",
		RotatesRefresh: true,
		TokenError: func(w http.ResponseWriter, code string, refresh bool) {
			desc := map[string]string{"invalid_client": "The client credentials are not valid", "invalid_grant": "Auth code doesn't exist or is invalid for the client"}[code]
			if refresh && code == "invalid_grant" {
				desc = "Invalid refresh token"
			}
			writeJSON(w, http.StatusBadRequest, map[string]any{"error": code, "error_description": desc})
		},
		Answer: func(is Issued, _ Account) map[string]any {
			return map[string]any{"access_token": is.Access, "expires_in": is.ExpiresIn, "token_type": "bearer",
				"restricted_to": []any{}, "refresh_token": is.Refresh}
		},
		UserInfo: func(w http.ResponseWriter, r *http.Request, req Request, a Account, ok bool) {
			if !ok {
				w.Header().Set("WWW-Authenticate", `Bearer realm="Service", error="invalid_token", error_description="The access token provided is invalid."`)
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			writeJSON(w, http.StatusOK, map[string]any{"type": "user", "id": a.ID, "name": a.Name, "login": a.Email, "status": "active"})
		},
	})
}
