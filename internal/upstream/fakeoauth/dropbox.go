package fakeoauth

import (
	"net/http"
	"net/url"
	"strings"
)

// Dropbox (scoped apps): short-lived access tokens (expires_in 14400) and a refresh token only
// for token_access_type=offline; a refresh answers with the new access token only (the refresh
// token is kept); errors as RFC 6749 JSON; the account from users/get_current_account, an RPC
// call: POST without a body (a JSON Content-Type with an empty body is refused, as Dropbox
// refuses input it cannot decode); revocation by auth/token/revoke, where the access token is
// the Bearer credential of a POST without a body and takes its refresh token with it, answered
// 200 null.
//
//   - https://developers.dropbox.com/oauth-guide
//   - https://www.dropbox.com/developers/documentation/http/documentation#oauth2-token
//   - https://www.dropbox.com/developers/documentation/http/documentation#users-get_current_account
//   - https://www.dropbox.com/developers/documentation/http/documentation#auth-token-revoke
//   - https://dropbox.tech/developers/using-oauth-2-0-with-offline-access
//
// Not confirmed there: the exact error_description texts, and what auth/token/revoke answers
// for a token that expired or that it no longer knows (the fake answers 401
// invalid_access_token, as the API does for any call with such a token, and revokes nothing).
const Dropbox Shape = "dropbox"

func init() {
	register(&Provider{
		Shape:       Dropbox,
		Paths:       Paths{"/oauth2/authorize", "/oauth2/token", "/2/users/get_current_account", "/2/auth/token/revoke"},
		TokenPrefix: "sl.",
		AccountIDOf: func(a Account) string { return "dbid:" + a.ID },
		Authorize: func(q url.Values) (string, string) {
			switch q.Get("token_access_type") {
			case "offline":
				return q.Get("scope") + offlineMark, ""
			case "", "online", "legacy":
				return q.Get("scope"), ""
			}
			return "", `Error (400): Invalid token_access_type "` + q.Get("token_access_type") + `"`
		},
		TokenError: func(w http.ResponseWriter, code string, refresh bool) {
			desc := map[string]string{"invalid_client": "Invalid client_id or client_secret", "invalid_grant": "code doesn't exist or has expired"}[code]
			if refresh && code == "invalid_grant" {
				desc = "refresh token is invalid or revoked"
			}
			writeJSON(w, http.StatusBadRequest, map[string]any{"error": code, "error_description": desc})
		},
		Answer: func(is Issued, a Account) map[string]any {
			if is.Refreshed {
				return map[string]any{"access_token": is.Access, "token_type": "bearer", "expires_in": is.ExpiresIn}
			}
			out := map[string]any{"access_token": is.Access, "token_type": "bearer", "expires_in": is.ExpiresIn,
				"refresh_token": is.Refresh, "account_id": "dbid:" + a.ID, "uid": "12345"}
			return withoutRefresh(out, is)
		},
		UserInfo: func(w http.ResponseWriter, r *http.Request, req Request, a Account, ok bool) {
			if r.Method != http.MethodPost || req.ContentType == "application/json" {
				http.Error(w, `Error in call to API function "users/get_current_account": request body: could not decode input as JSON`, http.StatusBadRequest)
				return
			}
			if !ok {
				writeJSON(w, http.StatusUnauthorized, dropboxInvalidToken)
				return
			}
			writeJSON(w, http.StatusOK, map[string]any{"account_id": "dbid:" + a.ID,
				"name":  map[string]any{"given_name": a.Name, "surname": "", "familiar_name": a.Name, "display_name": a.Name, "abbreviated_name": a.Name[:1]},
				"email": a.Email, "email_verified": true, "disabled": false, "account_type": map[string]any{".tag": "basic"}})
		},
		RevokeLive: func(w http.ResponseWriter, req Request, live func(string) bool) string {
			scheme, tok, _ := strings.Cut(req.Header.Get("Authorization"), " ")
			if !strings.EqualFold(scheme, "bearer") || tok == "" || len(req.Params) > 0 {
				writeJSON(w, http.StatusBadRequest, map[string]any{"error_summary": "bad request", "error": map[string]any{".tag": "other"}})
				return ""
			}
			if !live(tok) {
				// An expired token cannot authenticate the call that would revoke it.
				writeJSON(w, http.StatusUnauthorized, dropboxInvalidToken)
				return ""
			}
			writeJSON(w, http.StatusOK, nil)
			return tok
		},
	})
}

var dropboxInvalidToken = map[string]any{"error_summary": "invalid_access_token/..", "error": map[string]any{".tag": "invalid_access_token"}}
