package fakeoauth

import (
	"net/http"
)

// Zendesk Support, one account's subdomain: POST /oauth/tokens takes a JSON body with
// client_id and client_secret in it, for both grant types; the answer is {access_token,
// token_type: "bearer", scope, expires_in, refresh_token, refresh_token_expires_in}; a refresh
// answers a new refresh token and deletes the previous access and refresh tokens; errors are
// RFC 6749 bodies with Zendesk's descriptions. GET /api/v2/users/me answers {"user": {id,
// email, name, role, …}} (id a number); with a dead token, 401 {"error": "invalid_token", …}.
//
//   - https://support.zendesk.com/hc/en-us/articles/4408845965210-Using-OAuth-authentication-with-your-application
//   - https://developer.zendesk.com/api-reference/ticketing/oauth/grant_type_tokens/
//   - https://developer.zendesk.com/documentation/api-basics/authentication/refresh-token
//   - https://support.zendesk.com/hc/en-us/articles/9182123625370-Announcing-support-for-OAuth-refresh-token-grant-type-and-OAuth-access-and-refresh-token-expirations
//   - https://developer.zendesk.com/api-reference/ticketing/users/users/#show-self
//
// No revocation: Zendesk ends a token with DELETE /api/v2/oauth/tokens/current.json (the token
// as bearer credential), which the catalog's revocation styles do not express, so the fake
// serves none. Not confirmed there: the exact error descriptions (the fake's are Doorkeeper's
// defaults, which Zendesk's answers resemble); whether /oauth/tokens also takes a form body
// (the fake takes only the documented JSON); whether the token request needs scope (the
// documented example sends it, RFC 6749 does not; the fake does not require it); the
// refresh_token_expires_in the fake answers (30 days).
const Zendesk Shape = "zendesk"

func init() {
	register(&Provider{
		Shape:          Zendesk,
		Paths:          Paths{Authorize: "/oauth/authorizations/new", Token: "/oauth/tokens", UserInfo: "/api/v2/users/me"},
		ClientAuth:     "post",
		JSONRequests:   true,
		RotatesRefresh: true,
		AccountIDOf:    NumberID,
		Answer: func(is Issued, _ Account) map[string]any {
			out := RFC6749Answer(is)
			out["token_type"] = "bearer"
			if is.Refresh != "" {
				out["refresh_token_expires_in"] = int64(30 * 24 * 3600)
			}
			return out
		},
		TokenError: func(w http.ResponseWriter, code string, refresh bool) {
			desc := map[string]string{
				"invalid_grant":  "The provided authorization grant is invalid, expired, or revoked, or does not match the redirection URI used in the authorization request, or was issued to another client.",
				"invalid_client": "Client authentication failed due to unknown client, no client authentication included, or unsupported authentication method.",
			}[code]
			status := http.StatusBadRequest
			if code == "invalid_client" {
				status = http.StatusUnauthorized
			}
			writeJSON(w, status, map[string]any{"error": code, "error_description": desc})
		},
		UserInfo: func(w http.ResponseWriter, r *http.Request, req Request, a Account, ok bool) {
			if !ok {
				writeJSON(w, http.StatusUnauthorized, map[string]any{"error": "invalid_token",
					"error_description": "The access token provided is expired, revoked, malformed or invalid for other reasons."})
				return
			}
			writeJSON(w, http.StatusOK, map[string]any{"user": map[string]any{"id": a.Number, "email": a.Email, "name": a.Name,
				"role": "agent", "active": true, "url": "https://example.zendesk.com/api/v2/users/" + NumberID(a) + ".json"}})
		},
	})
}
