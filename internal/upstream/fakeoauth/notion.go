package fakeoauth

import (
	"net/http"
	"net/url"
)

// Notion: public connections. Token requests are JSON with the client's Basic credentials;
// every API call carries Notion-Version; owner=user on the authorization request; the token
// answer names the bot and its owner, and tokens come without expires_in; the account is the
// bot user's owner; revocation is JSON {token} with Basic credentials.
//
//   - https://developers.notion.com/reference/authorization
//   - https://developers.notion.com/reference/create-a-token
//   - https://developers.notion.com/changelog/retrieve-information-about-your-token
//   - https://developers.notion.com/reference/revoke-token
const Notion Shape = "notion"

// NotionVersion is the Notion-Version the Notion provider requires on its API calls.
const NotionVersion = "2022-06-28"

func notionError(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, map[string]any{"object": "error", "status": status, "code": code, "message": message})
}

func notionUser(a Account) map[string]any {
	return map[string]any{"object": "user", "id": a.ID, "name": a.Name, "avatar_url": nil, "type": "person", "person": map[string]any{"email": a.Email}}
}

func init() {
	register(&Provider{
		Shape:       Notion,
		Paths:       Paths{"/v1/oauth/authorize", "/v1/oauth/token", "/v1/users/me", "/v1/oauth/revoke"},
		TokenPrefix: "ntn_",
		Authorize: func(q url.Values) (string, string) {
			if q.Get("owner") != "user" {
				return "", "owner=user required"
			}
			return "", ""
		},
		TokenError: func(w http.ResponseWriter, code string, refresh bool) {
			notionError(w, http.StatusBadRequest, code, code)
		},
		CheckToken: func(w http.ResponseWriter, req Request) bool {
			if req.ContentType != "application/json" || req.ClientAuth != "basic" {
				notionError(w, http.StatusBadRequest, "invalid_request", "body must be JSON, client authenticated with Basic")
				return false
			}
			return true
		},
		Answer: func(is Issued, a Account) map[string]any {
			out := map[string]any{"access_token": is.Access, "token_type": "bearer", "bot_id": "b0t-" + a.ID,
				"workspace_name": "Fake Workspace", "workspace_id": "w0rkspace", "workspace_icon": nil,
				"owner": map[string]any{"type": "user", "user": notionUser(a)}, "duplicated_template_id": nil, "request_id": random(8)}
			if is.Refresh != "" {
				out["refresh_token"] = is.Refresh
			}
			return out
		},
		UserInfo: func(w http.ResponseWriter, r *http.Request, req Request, a Account, ok bool) {
			if r.Method != http.MethodGet || r.Header.Get("Notion-Version") != NotionVersion {
				notionError(w, http.StatusBadRequest, "missing_version", "Notion-Version header failed validation")
				return
			}
			if !ok {
				notionError(w, http.StatusUnauthorized, "unauthorized", "API token is invalid.")
				return
			}
			writeJSON(w, http.StatusOK, map[string]any{"object": "user", "id": "b0t-" + a.ID, "name": "Latchkey", "type": "bot",
				"bot": map[string]any{"owner": map[string]any{"type": "user", "user": notionUser(a)}, "workspace_name": "Fake Workspace"}})
		},
		Revoke: func(w http.ResponseWriter, req Request) string {
			if req.ClientAuth != "basic" || req.ContentType != "application/json" || req.Header.Get("Notion-Version") != NotionVersion {
				notionError(w, http.StatusBadRequest, "invalid_request", "body must be JSON, client authenticated with Basic")
				return ""
			}
			writeJSON(w, http.StatusOK, map[string]any{"request_id": random(8)})
			return req.Params.Get("token")
		},
	})
}
