package fakeoauth

import (
	"net/http"
	"net/url"
)

// Atlassian Cloud OAuth 2.0 (3LO): audience=api.atlassian.com and prompt=consent on the
// authorization request; offline_access is what gets a refresh token; refresh tokens rotate
// (each refresh answers a new one and the one used stops working); access tokens last an
// hour; a dead refresh token is answered 403 {"error": "invalid_grant", "error_description":
// "Unknown or invalid refresh token."}; the account is api.atlassian.com/me; the sites a token
// reaches are listed at /oauth/token/accessible-resources. No revocation endpoint.
//
//   - https://developer.atlassian.com/cloud/jira/platform/oauth-2-3lo-apps/
//   - https://developer.atlassian.com/cloud/oauth/getting-started/implementing-oauth-3lo
//   - https://developer.atlassian.com/cloud/oauth/getting-started/refresh-tokens
//
// Not confirmed there: the documentation's token requests are JSON; the preset sends a form,
// as common Atlassian clients do, and the fake takes both. Atlassian has also been seen
// answering a dead refresh token with 403 {"error": "unauthorized_client"}, which Latchkey
// would not read as "reconnect" (docs/providers/atlassian.md).
const Atlassian Shape = "atlassian"

// AccessibleResourcesPath lists the Atlassian sites a token reaches.
const AccessibleResourcesPath = "/oauth/token/accessible-resources"

func init() {
	register(&Provider{
		Shape:          Atlassian,
		Paths:          Paths{Authorize: "/authorize", Token: "/oauth/token", UserInfo: "/me"},
		TokenPrefix:    "eyJatl-",
		RotatesRefresh: true,
		Authorize: func(q url.Values) (string, string) {
			if q.Get("audience") != "api.atlassian.com" || q.Get("prompt") != "consent" {
				return "", "audience=api.atlassian.com and prompt=consent are required"
			}
			return q.Get("scope"), ""
		},
		Extra: map[string]func(*Server, http.ResponseWriter, *http.Request){
			AccessibleResourcesPath: (*Server).accessibleResources,
		},
		CheckToken: func(w http.ResponseWriter, req Request) bool {
			if (req.ContentType != "application/json" && req.ContentType != "application/x-www-form-urlencoded") || req.ClientAuth != "post" {
				writeJSON(w, http.StatusUnauthorized, map[string]any{"error": "access_denied", "error_description": "Unauthorized"})
				return false
			}
			return true
		},
		TokenError: func(w http.ResponseWriter, code string, refresh bool) {
			status, desc := http.StatusBadRequest, ""
			switch code {
			case "invalid_grant":
				status, desc = http.StatusForbidden, "Unknown or invalid refresh token."
			case "invalid_client":
				status, desc = http.StatusUnauthorized, "Unauthorized"
			}
			writeJSON(w, status, map[string]any{"error": code, "error_description": desc})
		},
		UserInfo: func(w http.ResponseWriter, r *http.Request, req Request, a Account, ok bool) {
			if !ok {
				writeJSON(w, http.StatusUnauthorized, map[string]any{"code": 401, "message": "Unauthorized"})
				return
			}
			writeJSON(w, http.StatusOK, map[string]any{"account_type": "atlassian", "account_id": a.ID, "email": a.Email,
				"name": a.Name, "picture": "https://avatar.example/" + a.ID, "account_status": "active", "nickname": a.Login,
				"zoneinfo": "Europe/Paris", "locale": "en-GB", "extended_profile": map[string]any{}})
		},
	})
}

// accessibleResources answers GET /oauth/token/accessible-resources for a live bearer token:
// the sites the token reaches, whose id is the cloud id of the API's URLs
// (https://api.atlassian.com/ex/jira/{cloudid}/…).
func (s *Server) accessibleResources(w http.ResponseWriter, r *http.Request) {
	a, ok := s.bearer(r)
	if !ok {
		writeJSON(w, http.StatusUnauthorized, map[string]any{"code": 401, "message": "Unauthorized"})
		return
	}
	writeJSON(w, http.StatusOK, []any{map[string]any{"id": "11111111-2222-3333-4444-" + a.ID, "url": "https://fake.atlassian.net",
		"name": "fake", "scopes": []string{"read:jira-work", "read:me"}, "avatarUrl": "https://site-admin-avatar-cdn.prod.public.atl-paas.net/avatars/240/rocket.png"}})
}
