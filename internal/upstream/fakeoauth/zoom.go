package fakeoauth

import (
	"net/http"
)

// Zoom (user-managed OAuth apps): the client's credentials in a Basic header at the token and
// revocation endpoints; access tokens of an hour; every refresh answers with a new refresh token
// and the fake ends the one used; errors as {"reason", "error"}; the account from /v2/users/me
// (id, email); revocation by POST /oauth/revoke of token, answered {"status": "success"}.
//
//   - https://developers.zoom.us/docs/integrations/oauth/ (authorization, token request,
//     refresh, revocation)
//   - https://developers.zoom.us/docs/api/users/#tag/users/GET/users/{userId}
//
// Not confirmed there: that the refresh token used stops working at once (Zoom documents a new
// one with every refresh), the exact reason texts, and the error code of a revoked refresh token
// (the fake says invalid_grant).
const Zoom Shape = "zoom"

func init() {
	register(&Provider{
		Shape:          Zoom,
		Paths:          Paths{"/oauth/authorize", "/oauth/token", "/v2/users/me", "/oauth/revoke"},
		TokenPrefix:    "eyJzm.",
		ClientAuth:     "basic",
		RotatesRefresh: true,
		Scopes:         []string{"user:read:user", "meeting:read:list_meetings"},
		TokenError: func(w http.ResponseWriter, code string, refresh bool) {
			reason := map[string]string{"invalid_client": "Invalid client_id or client_secret", "invalid_grant": "Invalid authorization code"}[code]
			if refresh {
				reason = "Invalid Token!"
			}
			status := http.StatusBadRequest
			if code == "invalid_client" {
				status = http.StatusUnauthorized
			}
			writeJSON(w, status, map[string]any{"reason": reason, "error": code})
		},
		UserInfo: func(w http.ResponseWriter, r *http.Request, req Request, a Account, ok bool) {
			if !ok {
				writeJSON(w, http.StatusUnauthorized, map[string]any{"code": 124, "message": "Invalid access token."})
				return
			}
			writeJSON(w, http.StatusOK, map[string]any{"id": a.ID, "first_name": a.Name, "last_name": "", "display_name": a.Name,
				"email": a.Email, "type": 1, "status": "active"})
		},
		Revoke: func(w http.ResponseWriter, req Request) string {
			if req.ClientAuth != "basic" {
				writeJSON(w, http.StatusUnauthorized, map[string]any{"reason": "Invalid client_id or client_secret", "error": "invalid_client"})
				return ""
			}
			writeJSON(w, http.StatusOK, map[string]any{"status": "success"})
			return req.Params.Get("token")
		},
	})
}
