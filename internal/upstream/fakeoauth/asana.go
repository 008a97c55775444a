package fakeoauth

import (
	"net/http"
)

// Asana: RFC 6749 token answers that also carry the person in "data" (id, gid, name, email);
// access tokens last an hour (expires_in 3600) and a refresh answer has no refresh_token (the
// one used is kept); RFC 6749 error bodies; /api/1.0/users/me answers {"data": {gid, email,
// name, …}}; POST /-/oauth_revoke with the client's credentials and the token answers 200.
//
//   - https://developers.asana.com/docs/oauth
//   - https://developers.asana.com/reference/getuser
//
// Not confirmed there: what /-/oauth_revoke answers for an access token (its documentation
// speaks of refresh tokens; the fake accepts both, and revoking the refresh token ends the
// access tokens issued with it).
const Asana Shape = "asana"

func init() {
	register(&Provider{
		Shape:       Asana,
		Paths:       Paths{"/-/oauth_authorize", "/-/oauth_token", "/api/1.0/users/me", "/-/oauth_revoke"},
		TokenPrefix: "2/1200/",
		ClientAuth:  "post",
		Answer: func(is Issued, a Account) map[string]any {
			out := map[string]any{"access_token": is.Access, "token_type": "bearer", "expires_in": is.ExpiresIn,
				"data": map[string]any{"id": a.ID, "gid": a.ID, "name": a.Name, "email": a.Email}}
			if !is.Refreshed {
				out["refresh_token"] = is.Refresh
			}
			return out
		},
		TokenError: func(w http.ResponseWriter, code string, refresh bool) {
			writeJSON(w, http.StatusBadRequest, map[string]any{"error": code, "error_description": "The `refresh_token` is invalid or has been revoked."})
		},
		UserInfo: func(w http.ResponseWriter, r *http.Request, req Request, a Account, ok bool) {
			if !ok {
				writeJSON(w, http.StatusUnauthorized, map[string]any{"errors": []any{map[string]any{"message": "Not Authorized"}}})
				return
			}
			writeJSON(w, http.StatusOK, map[string]any{"data": map[string]any{"gid": a.ID, "email": a.Email, "name": a.Name,
				"resource_type": "user", "workspaces": []any{}}})
		},
	})
}
