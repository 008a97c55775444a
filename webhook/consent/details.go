package consent

import (
	"net/http"

	"latchkey.dev/latchkey/internal/authzdetails"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/webhook/oauth"
)

// parseDetails reads authorization_details (RFC 9396) against the Project's declared types; a
// refusal is invalid_authorization_details (§5), sent to the verified redirect URI like any
// other error of a request whose client and redirect are known.
func parseDetails(p *config.Project, raw string) ([]authzdetails.Detail, error) {
	ds, err := authzdetails.Parse(p.AuthorizationDetails, raw)
	if err != nil {
		return nil, oauth.Error{Code: authzdetails.ErrorCode, Description: err.Error(), Status: http.StatusBadRequest}
	}
	return ds, nil
}

// withDetails adds the approved details to an audit record's details, so the record says what
// the person allowed and not only which scopes.
func withDetails(m map[string]string, ds []authzdetails.Detail) map[string]string {
	if len(ds) > 0 {
		m["authorization_details"] = authzdetails.Marshal(ds)
	}
	return m
}
