package fakeoauth

import "strings"

// offlineMark rides on a grant's scope to remember that the authorization asked for offline
// access (Google's access_type=offline, Microsoft's offline_access, Dropbox's
// token_access_type=offline): only then does the code answer carry a refresh token. Answer
// functions take it off with offline.
const offlineMark = "\x00offline"

// offline splits a grant's scope into the scope and whether offline access was granted.
func offline(scope string) (string, bool) {
	s, ok := strings.CutSuffix(scope, offlineMark)
	return s, ok
}

// withoutRefresh drops the refresh token from a code answer that asked for no offline access.
func withoutRefresh(out map[string]any, is Issued) map[string]any {
	scope, ok := offline(is.Scope)
	if scope != "" {
		out["scope"] = scope
	} else {
		delete(out, "scope")
	}
	if !ok && !is.Refreshed {
		delete(out, "refresh_token")
	}
	return out
}
