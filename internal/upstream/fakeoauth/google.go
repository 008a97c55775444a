package fakeoauth

import (
	"net/http"
	"net/url"
	"strings"
)

// Google (OAuth 2.0 for web server applications): a refresh token only when the authorization
// asked access_type=offline, and again on a later authorization only with prompt=consent (the
// fake asks for both, as the preset sends them); access tokens of an hour (expires_in 3599);
// a refresh answers without a refresh token (the one used is kept); RFC 6749 errors with
// Google's error_description; the account from the OpenID Connect userinfo endpoint (sub,
// email); revocation by POST of token to oauth2.googleapis.com/revoke, which ends the access
// token's refresh token too.
//
//   - https://developers.google.com/identity/protocols/oauth2/web-server (offline access,
//     prompt, token answer, refresh, revocation)
//   - https://developers.google.com/identity/openid-connect/openid-connect (userinfo claims)
//
// Not confirmed there: the error_description texts and the userinfo endpoint's 401 body. The
// token answer's id_token is left out (the preset reads userinfo, not the ID token), and the
// fake answers 200 to the revocation of a token it no longer knows, where Google answers 400
// invalid_token (which Latchkey counts as revoked too).
const Google Shape = "google"

func init() {
	register(&Provider{
		Shape:       Google,
		Paths:       Paths{"/o/oauth2/v2/auth", "/token", "/v1/userinfo", "/revoke"},
		TokenPrefix: "ya29.",
		ClientAuth:  "post",
		Scopes:      []string{"openid", "email", "https://www.googleapis.com/auth/drive.readonly"},
		Authorize: func(q url.Values) (string, string) {
			if at := q.Get("access_type"); at != "" && at != "online" && at != "offline" {
				return "", "Error 400: invalid_request Invalid access_type: " + at
			}
			scope := q.Get("scope")
			if q.Get("access_type") == "offline" && strings.Contains(" "+q.Get("prompt")+" ", " consent ") {
				scope += offlineMark
			}
			return scope, ""
		},
		TokenError: func(w http.ResponseWriter, code string, refresh bool) {
			status, desc := http.StatusBadRequest, "Bad Request"
			switch {
			case code == "invalid_client":
				status, desc = http.StatusUnauthorized, "Unauthorized"
			case refresh:
				desc = "Token has been expired or revoked."
			}
			writeJSON(w, status, map[string]any{"error": code, "error_description": desc})
		},
		Answer: func(is Issued, _ Account) map[string]any {
			out := RFC6749Answer(is)
			if is.Refreshed {
				delete(out, "refresh_token")
			}
			return withoutRefresh(out, is)
		},
		UserInfo: func(w http.ResponseWriter, r *http.Request, req Request, a Account, ok bool) {
			if !ok {
				w.Header().Set("WWW-Authenticate", `Bearer realm="https://accounts.google.com/", error="invalid_token"`)
				writeJSON(w, http.StatusUnauthorized, map[string]any{"error": "invalid_request", "error_description": "Invalid Credentials"})
				return
			}
			writeJSON(w, http.StatusOK, map[string]any{"sub": a.ID, "name": a.Name, "given_name": a.Name, "email": a.Email,
				"email_verified": true, "picture": "https://lh3.googleusercontent.com/a/default-user"})
		},
		Revoke: func(w http.ResponseWriter, req Request) string {
			// The token alone identifies what to revoke; client credentials are not needed.
			tok := req.Params.Get("token")
			if req.ContentType != "application/x-www-form-urlencoded" || tok == "" {
				writeJSON(w, http.StatusBadRequest, map[string]any{"error": "invalid_request"})
				return ""
			}
			w.WriteHeader(http.StatusOK)
			return tok
		},
	})
}
