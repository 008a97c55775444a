package fakeoauth

import (
	"net/http"
	"strings"
)

// GitHub Enterprise Server, GitHub App user tokens: github.com's wire format under the
// server's own address, the REST API under /api/v3. The token endpoint answers JSON when
// asked with Accept: application/json and errors as HTTP 200 with error, error_description
// and error_uri (bad_verification_code for a spent code, bad_refresh_token for a dead refresh
// token); user tokens expire after eight hours and a refresh answers a new refresh token, the
// old one dying; Disconnect deletes the grant with the app's Basic credentials and the token
// in a JSON body, answered 204.
//
//   - https://docs.github.com/en/enterprise-server@latest/apps/oauth-apps/building-oauth-apps/authorizing-oauth-apps
//   - https://docs.github.com/en/enterprise-server@latest/apps/creating-github-apps/authenticating-with-a-github-app/refreshing-user-access-tokens
//   - https://docs.github.com/en/enterprise-server@latest/rest/users/users#get-the-authenticated-user
//   - https://docs.github.com/en/enterprise-server@latest/rest/apps/oauth-applications#delete-an-app-authorization
const GHES Shape = "github-enterprise-server"

// GitHub is github.com with the github preset: the same wire format at github.com and
// api.github.com (the user at /user), OAuth app tokens that never expire (gho_, no refresh
// token: a story runs it with tokens without expires_in), and no revocation URL in the preset.
//
//   - https://docs.github.com/en/apps/oauth-apps/building-oauth-apps/authorizing-oauth-apps
//   - https://docs.github.com/en/rest/users/users#get-the-authenticated-user
const GitHub Shape = "github"

func init() {
	register(githubShaped(GHES, Paths{"/login/oauth/authorize", "/login/oauth/access_token", "/api/v3/user", "/api/v3/applications/{client_id}/grant"}, "ghu_"))
	register(githubShaped(GitHub, Paths{"/login/oauth/authorize", "/login/oauth/access_token", "/user", ""}, "gho_"))
}

// githubShaped is GitHub's token endpoint, user API and grant revocation at paths.
func githubShaped(shape Shape, paths Paths, prefix string) *Provider {
	return &Provider{
		Shape:          shape,
		Paths:          paths,
		TokenPrefix:    prefix,
		Scopes:         []string{"repo"},
		RotatesRefresh: true,
		AccountIDOf:    NumberID,
		CheckToken: func(w http.ResponseWriter, req Request) bool {
			if req.Header.Get("Accept") != "application/json" && !strings.Contains(req.Header.Get("Accept"), "json") {
				// Latchkey always asks for JSON; a form-encoded answer would not be read.
				http.Error(w, "access_token=&error=accept_json_please", http.StatusOK)
				return false
			}
			return true
		},
		TokenError: func(w http.ResponseWriter, code string, refresh bool) {
			switch {
			case code == "invalid_grant" && refresh:
				code = "bad_refresh_token"
			case code == "invalid_grant":
				code = "bad_verification_code"
			case code == "invalid_client":
				code = "incorrect_client_credentials"
			}
			writeJSON(w, http.StatusOK, map[string]any{"error": code, "error_description": "The code passed is incorrect or expired.",
				"error_uri": "https://docs.github.com/enterprise-server/apps/managing-oauth-apps/troubleshooting-oauth-app-access-token-request-errors"})
		},
		Answer: func(is Issued, _ Account) map[string]any {
			out := map[string]any{"access_token": is.Access, "token_type": "bearer", "scope": is.Scope}
			if is.Refresh != "" {
				out["refresh_token"], out["expires_in"], out["refresh_token_expires_in"] = is.Refresh, is.ExpiresIn, 15897600
			}
			return out
		},
		UserInfo: func(w http.ResponseWriter, r *http.Request, req Request, a Account, ok bool) {
			if !ok {
				writeJSON(w, http.StatusUnauthorized, map[string]any{"message": "Bad credentials", "documentation_url": "https://docs.github.com/enterprise-server/rest"})
				return
			}
			writeJSON(w, http.StatusOK, map[string]any{"id": a.Number, "login": a.Login, "name": a.Name, "type": "User"})
		},
		Revoke: func(w http.ResponseWriter, req Request) string {
			if req.Method != http.MethodDelete || req.ClientAuth != "basic" || req.ContentType != "application/json" {
				writeJSON(w, http.StatusNotFound, map[string]any{"message": "Not Found"})
				return ""
			}
			w.WriteHeader(http.StatusNoContent)
			return req.Params.Get("access_token")
		},
	}
}
