package fakeoauth

import (
	"net/http"
	"net/url"
)

// Slack: OAuth v2 as a user. The scopes come in user_scope, comma-separated; the code answer
// carries the app's bot token at the top level and the person's token in authed_user; with
// token rotation on, user tokens expire after 12 hours and a refresh answers at the top level,
// for the token refreshed, with a new refresh token; errors are HTTP 200 {"ok": false}.
//
//   - https://docs.slack.dev/authentication/installing-with-oauth
//   - https://docs.slack.dev/reference/methods/oauth.v2.access
//   - https://docs.slack.dev/authentication/using-token-rotation
//   - https://docs.slack.dev/reference/methods/auth.test
//   - https://docs.slack.dev/reference/methods/auth.revoke
const Slack Shape = "slack"

func init() {
	register(&Provider{
		Shape:          Slack,
		Paths:          Paths{"/oauth/v2/authorize", "/api/oauth.v2.access", "/api/auth.test", "/api/auth.revoke"},
		TokenPrefix:    "xoxp-",
		Scopes:         []string{"channels:history", "chat:write"},
		ClientAuth:     "basic",
		RotatesRefresh: true,
		Authorize:      func(q url.Values) (string, string) { return q.Get("user_scope"), "" },
		TokenError: func(w http.ResponseWriter, code string, refresh bool) {
			switch {
			case code == "invalid_grant" && refresh:
				code = "invalid_refresh_token"
			case code == "invalid_grant":
				code = "invalid_code"
			}
			writeJSON(w, http.StatusOK, map[string]any{"ok": false, "error": code})
		},
		Answer: func(is Issued, a Account) map[string]any {
			if is.Refreshed {
				return map[string]any{"ok": true, "access_token": is.Access, "token_type": "user", "expires_in": is.ExpiresIn,
					"refresh_token": is.Refresh, "scope": is.Scope}
			}
			user := map[string]any{"id": a.ID, "scope": is.Scope, "access_token": is.Access, "token_type": "user"}
			if is.Refresh != "" {
				user["refresh_token"], user["expires_in"] = is.Refresh, is.ExpiresIn
			}
			return map[string]any{"ok": true, "app_id": "A0FAKE", "authed_user": user, "scope": "commands",
				"token_type": "bot", "access_token": "xoxb-" + random(24), "bot_user_id": "B0FAKE",
				"team": map[string]any{"id": "T0FAKE", "name": "Fake Team"}, "enterprise": nil, "is_enterprise_install": false}
		},
		UserInfo: func(w http.ResponseWriter, r *http.Request, req Request, a Account, ok bool) {
			if !ok {
				writeJSON(w, http.StatusOK, map[string]any{"ok": false, "error": "invalid_auth"})
				return
			}
			writeJSON(w, http.StatusOK, map[string]any{"ok": true, "url": "https://fake.slack.com/", "team": "Fake Team",
				"user": a.Login, "team_id": "T0FAKE", "user_id": a.ID, "is_enterprise_install": false})
		},
		Revoke: func(w http.ResponseWriter, req Request) string {
			// auth.revoke takes the token to revoke; it answers {"ok": true, "revoked": true}.
			writeJSON(w, http.StatusOK, map[string]any{"ok": true, "revoked": true})
			return req.Params.Get("token")
		},
	})
}
