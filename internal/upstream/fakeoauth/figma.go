package fakeoauth

import (
	"net/http"
)

// Figma (OAuth apps): codes redeemed at /v1/oauth/token and refreshes at /v1/oauth/refresh,
// both with the client's Basic credentials (the token endpoint here refuses a refresh, so a
// connector that ignores refreshURL fails); the code answer carries user_id_string and a
// refresh token, a refresh answer only the new access token and its expires_in (the refresh
// token is kept); errors as {"error": true, "status", "message"}; the account from /v1/me
// (id, email, handle). Figma documents no revocation endpoint.
//
//   - https://developers.figma.com/docs/rest-api/oauth-apps/ (authorization, token, refresh)
//   - https://developers.figma.com/docs/rest-api/users-endpoints/ (GET /v1/me)
//
// Not confirmed there: whether scopes are joined with spaces or commas (the preset sends
// Latchkey's default, spaces, and asks for one scope), and the message texts.
const Figma Shape = "figma"

func init() {
	register(&Provider{
		Shape:       Figma,
		Paths:       Paths{"/oauth", "/v1/oauth/token", "/v1/me", ""},
		RefreshPath: "/v1/oauth/refresh",
		TokenPrefix: "figu_",
		ClientAuth:  "basic",
		TokenError: func(w http.ResponseWriter, code string, refresh bool) {
			msg := map[string]string{"invalid_client": "Invalid client credentials", "invalid_grant": "Invalid code"}[code]
			if refresh {
				msg = "Invalid refresh token"
			}
			writeJSON(w, http.StatusBadRequest, map[string]any{"error": true, "status": 400, "message": msg, "i18n": nil})
		},
		Answer: func(is Issued, a Account) map[string]any {
			if is.Refreshed {
				return map[string]any{"access_token": is.Access, "token_type": "bearer", "expires_in": is.ExpiresIn}
			}
			return map[string]any{"user_id_string": a.ID, "access_token": is.Access, "token_type": "bearer",
				"expires_in": is.ExpiresIn, "refresh_token": is.Refresh}
		},
		UserInfo: func(w http.ResponseWriter, r *http.Request, req Request, a Account, ok bool) {
			if !ok {
				writeJSON(w, http.StatusForbidden, map[string]any{"status": 403, "err": "Invalid token"})
				return
			}
			writeJSON(w, http.StatusOK, map[string]any{"id": a.ID, "email": a.Email, "handle": a.Name, "img_url": "https://s3-alpha.figma.com/profile/default"})
		},
	})
}
