package oauth

import (
	"encoding/json"
	"net/http"
	"net/url"

	"latchkey.dev/latchkey/internal/authzdetails"
	"latchkey.dev/latchkey/internal/config"
)

// Rich authorization requests (RFC 9396) at the token endpoint: the details a person approved
// travel with the code and the tokens (store.AuthCode and store.Token AuthorizationDetails,
// canonical JSON); a token request may narrow them with its own authorization_details (§6.1),
// never widen them.

// ErrInvalidAuthorizationDetails is RFC 9396 §5's refusal of authorization_details.
var ErrInvalidAuthorizationDetails = Error{Code: authzdetails.ErrorCode, Status: http.StatusBadRequest}

// DetailsError turns an authzdetails refusal into the OAuth error that carries it.
func DetailsError(err error) Error {
	return ErrInvalidAuthorizationDetails.WithDescription(err.Error())
}

// NarrowDetails is what a token request may have of the approved details (canonical JSON, as
// stored): all of them when the request sends no authorization_details; otherwise the details
// it sends, which must be valid for the Project's types and each fit inside one approved
// detail (authzdetails.Covers). A request that sends details where none were approved is
// refused too: there is nothing to narrow.
func NarrowDetails(p *config.Project, f url.Values, approvedJSON string) (narrowed, approved []authzdetails.Detail, err error) {
	approved, err = authzdetails.Unmarshal(approvedJSON)
	if err != nil {
		return nil, nil, Internal(err)
	}
	raw := f.Get("authorization_details")
	if raw == "" {
		return approved, approved, nil
	}
	requested, err := authzdetails.Parse(p.AuthorizationDetails, raw)
	if err != nil {
		return nil, nil, DetailsError(err)
	}
	if !authzdetails.Covers(approved, requested) {
		return nil, nil, ErrInvalidAuthorizationDetails.WithDescription("authorization_details asks for more than was approved")
	}
	return requested, approved, nil
}

// detailsJSON is the authorization_details member of an introspection answer: the token's
// details as stored, or nothing.
func detailsJSON(stored string) json.RawMessage {
	if stored == "" {
		return nil
	}
	return json.RawMessage(stored)
}
