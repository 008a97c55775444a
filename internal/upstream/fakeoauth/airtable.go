package fakeoauth

import (
	"net/http"
	"net/url"
)

// Airtable: the authorization request must carry scope (at least one), state and an S256 code
// challenge; POST /oauth2/v1/token takes a form with a confidential client's credentials as
// HTTP Basic; the answer is RFC 6749's with scope, expires_in 3600 and refresh_expires_in;
// every refresh answers a new refresh token and the one used (and the access token it was
// issued with) stops working; errors are RFC 6749 bodies. GET /v0/meta/whoami answers the
// person's id ("usr…"), the token's scopes and, with user.email:read, the email; without a
// live token, 401 {"error": {"type": "AUTHENTICATION_REQUIRED", …}}.
//
//   - https://airtable.com/developers/web/api/oauth-reference
//   - https://airtable.com/developers/web/guides/oauth-integrations
//   - https://airtable.com/developers/web/api/get-user-id-scopes
//
// No revocation endpoint is documented there, so the fake serves none. Not confirmed there:
// the wording of error_description (the fake's is generic) and the token format (the fake's
// tokens only start like Airtable's).
const Airtable Shape = "airtable"

func init() {
	register(&Provider{
		Shape:          Airtable,
		Paths:          Paths{Authorize: "/oauth2/v1/authorize", Token: "/oauth2/v1/token", UserInfo: "/v0/meta/whoami"},
		TokenPrefix:    "oaaFAKE.v1.",
		ClientAuth:     "basic",
		RotatesRefresh: true,
		Authorize: func(q url.Values) (string, string) {
			if q.Get("scope") == "" || q.Get("state") == "" {
				return "", "invalid_request: scope and state are required"
			}
			return q.Get("scope"), ""
		},
		Answer: func(is Issued, _ Account) map[string]any {
			out := RFC6749Answer(is)
			if is.Refresh != "" {
				out["refresh_expires_in"] = int64(60 * 24 * 3600)
			}
			return out
		},
		TokenError: func(w http.ResponseWriter, code string, refresh bool) {
			status := http.StatusBadRequest
			if code == "invalid_client" {
				status = http.StatusUnauthorized
			}
			writeJSON(w, status, map[string]any{"error": code, "error_description": "The request was refused."})
		},
		UserInfo: func(w http.ResponseWriter, r *http.Request, req Request, a Account, ok bool) {
			if !ok {
				writeJSON(w, http.StatusUnauthorized, map[string]any{"error": map[string]any{"type": "AUTHENTICATION_REQUIRED", "message": "Authentication required"}})
				return
			}
			writeJSON(w, http.StatusOK, map[string]any{"id": "usr" + a.ID, "scopes": []string{"user.email:read"}, "email": a.Email})
		},
		AccountIDOf: func(a Account) string { return "usr" + a.ID },
	})
}
