package fakeoauth

import (
	"net/http"
	"strings"
)

// Linear: comma-separated scopes, RFC 6749 token answers (access tokens of 24 hours with a
// refresh token), a GraphQL API from which the account is read by a query for the viewer.
// The linear preset sets no revocation URL (its form is not confirmed in the pages the preset
// was written from), so the fake serves none and the story checks that Disconnect calls
// nothing.
//
//   - https://linear.app/developers/oauth-2-0-authentication
//   - https://linear.app/developers/graphql
//
// Not confirmed there: whether the token endpoint takes Basic client credentials as well as
// the form's (the fake takes both).
const Linear Shape = "linear"

func init() {
	register(&Provider{
		Shape:          Linear,
		Paths:          Paths{Authorize: "/oauth/authorize", Token: "/oauth/token", UserInfo: "/graphql"},
		TokenPrefix:    "lin_oauth_",
		Scopes:         []string{"read", "write"},
		RotatesRefresh: true,
		Answer: func(is Issued, _ Account) map[string]any {
			// "Comma separated list of scopes" on the way in; the answer lists them with spaces.
			is.Scope = strings.ReplaceAll(is.Scope, ",", " ")
			return RFC6749Answer(is)
		},
		UserInfo: func(w http.ResponseWriter, r *http.Request, req Request, a Account, ok bool) {
			if r.Method != http.MethodPost || req.ContentType != "application/json" || !strings.Contains(req.Params.Get("query"), "viewer") {
				writeJSON(w, http.StatusBadRequest, map[string]any{"errors": []any{map[string]any{"message": "POST a JSON body with a query"}}})
				return
			}
			if !ok {
				writeJSON(w, http.StatusUnauthorized, map[string]any{"errors": []any{map[string]any{"message": "Authentication required"}}})
				return
			}
			writeJSON(w, http.StatusOK, map[string]any{"data": map[string]any{"viewer": map[string]any{"id": a.ID, "name": a.Name, "email": a.Email}}})
		},
	})
}
