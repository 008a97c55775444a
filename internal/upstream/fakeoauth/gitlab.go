package fakeoauth

import (
	"net/http"
)

// GitLab (Doorkeeper): RFC 6749 token answers with created_at, access tokens of two hours
// (expires_in 7200), a new refresh token on every refresh with the old one revoked, RFC 6749
// error bodies with Doorkeeper's error_description, RFC 7009 revocation answering 200 {}, and
// the account from /api/v4/user. The same paths serve GitLab.com and a self-managed GitLab
// under its base URL.
//
//   - https://docs.gitlab.com/api/oauth2/ (authorization code flow with PKCE, token answer,
//     refresh, revocation)
//   - https://docs.gitlab.com/api/users/#get-the-current-user
//
// Not confirmed there: the exact error_description texts, copied from Doorkeeper's defaults.
const GitLab Shape = "gitlab"

func init() {
	register(&Provider{
		Shape:          GitLab,
		Paths:          Paths{"/oauth/authorize", "/oauth/token", "/api/v4/user", "/oauth/revoke"},
		TokenPrefix:    "gloas-",
		ClientAuth:     "post",
		RotatesRefresh: true,
		AccountIDOf:    NumberID,
		TokenError: func(w http.ResponseWriter, code string, refresh bool) {
			desc := map[string]string{
				"invalid_grant":  "The provided authorization grant is invalid, expired, revoked, does not match the redirection URI used in the authorization request, or was issued to another client.",
				"invalid_client": "Client authentication failed due to unknown client, no client authentication included, or unsupported authentication method.",
			}[code]
			status := http.StatusBadRequest
			if code == "invalid_client" {
				status = http.StatusUnauthorized
			}
			writeJSON(w, status, map[string]any{"error": code, "error_description": desc})
		},
		Answer: func(is Issued, _ Account) map[string]any {
			out := RFC6749Answer(is)
			out["token_type"], out["created_at"] = "Bearer", 1733140800
			return out
		},
		UserInfo: func(w http.ResponseWriter, r *http.Request, req Request, a Account, ok bool) {
			if !ok {
				writeJSON(w, http.StatusUnauthorized, map[string]any{"message": "401 Unauthorized"})
				return
			}
			writeJSON(w, http.StatusOK, map[string]any{"id": a.Number, "username": a.Login, "name": a.Name, "email": a.Email,
				"state": "active", "web_url": "https://gitlab.example.com/" + a.Login})
		},
		Revoke: func(w http.ResponseWriter, req Request) string {
			// RFC 7009 with the client in the form; 200 {} whether or not the token was known.
			if req.Params.Get("client_id") == "" {
				writeJSON(w, http.StatusUnauthorized, map[string]any{"error": "invalid_client"})
				return ""
			}
			writeJSON(w, http.StatusOK, map[string]any{})
			return req.Params.Get("token")
		},
	})
}
