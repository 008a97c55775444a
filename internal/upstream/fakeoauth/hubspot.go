package fakeoauth

import (
	"net/http"
	"strconv"
)

// HubSpot, OAuth v1: POST /oauth/v1/token takes a form with client_id and client_secret in it
// and answers {token_type: "bearer", access_token, refresh_token, expires_in: 1800}; a refresh
// answers the same refresh token again (it is kept); a refused request is 400 with HubSpot's
// own body, {"status": "BAD_REFRESH_TOKEN", "message": …, "correlationId": …}, not RFC 6749's.
// The account is the portal the app is installed in: GET /account-info/v3/details with the
// access token as a bearer credential answers portalId, uiDomain, accountType, timeZone, …;
// without a live token, 401 {"status": "error", "category": "INVALID_AUTHENTICATION", …}.
//
//   - https://developers.hubspot.com/docs/api-reference/legacy/authentication/oauth-tokens/v1/guide
//   - https://developers.hubspot.com/docs/methods/OAuth2/refresh-access-token
//   - https://developers.hubspot.com/changelog/upcoming-expiration-of-oauth-access-tokens-is-changing
//   - https://developers.hubspot.com/docs/api-reference/legacy/account/account-information/get-account-details
//
// No revocation: HubSpot documents DELETE /oauth/v1/refresh-tokens/{token}, with the token in
// the URL path (and it leaves the access tokens working), so the preset sets none and the fake
// serves none. Not confirmed in those pages: the exact status names and messages of refused
// token requests (the fake's are BAD_AUTH_CODE, BAD_REFRESH_TOKEN, BAD_CLIENT_ID; the pages
// disagree on the token answer's field names too, one reference page showing camelCase
// accessToken/expiresIn, the guide snake_case, which the fake follows); that PKCE is honoured
// at /oauth/authorize (the v1 token request lists code_verifier).
const HubSpot Shape = "hubspot"

// HubSpotPortalID is the one portal every account of the fake belongs to, so two people's
// connections name the same HubSpot account, as two users of one portal's do.
const HubSpotPortalID = 24681357

func hubspotPortal(Account) string { return strconv.Itoa(HubSpotPortalID) }

func init() {
	register(&Provider{
		Shape:       HubSpot,
		Paths:       Paths{Authorize: "/oauth/authorize", Token: "/oauth/v1/token", UserInfo: "/account-info/v3/details"},
		TokenPrefix: "CKFAKE",
		ClientAuth:  "post",
		AccountIDOf: hubspotPortal,
		Answer: func(is Issued, _ Account) map[string]any {
			return map[string]any{"token_type": "bearer", "access_token": is.Access, "refresh_token": is.Refresh, "expires_in": is.ExpiresIn}
		},
		TokenError: func(w http.ResponseWriter, code string, refresh bool) {
			status, msg := "BAD_GRANT_TYPE", "unsupported grant type"
			switch {
			case code == "invalid_grant" && refresh:
				status, msg = "BAD_REFRESH_TOKEN", "missing or invalid refresh token"
			case code == "invalid_grant":
				status, msg = "BAD_AUTH_CODE", "missing or unknown auth code"
			case code == "invalid_client":
				status, msg = "BAD_CLIENT_ID", "missing or unknown client id"
			case code == "invalid_request":
				status, msg = "BAD_REQUEST", "invalid request"
			}
			writeJSON(w, http.StatusBadRequest, map[string]any{"status": status, "message": msg, "correlationId": random(12)})
		},
		UserInfo: func(w http.ResponseWriter, r *http.Request, req Request, a Account, ok bool) {
			if !ok {
				writeJSON(w, http.StatusUnauthorized, map[string]any{"status": "error", "message": "Authentication credentials not found.",
					"category": "INVALID_AUTHENTICATION", "correlationId": random(12)})
				return
			}
			writeJSON(w, http.StatusOK, map[string]any{"portalId": HubSpotPortalID, "accountType": "STANDARD", "timeZone": "US/Eastern",
				"companyCurrency": "USD", "additionalCurrencies": []any{}, "utcOffset": "-05:00", "utcOffsetMilliseconds": -18000000,
				"uiDomain": "app.hubspot.com", "dataHostingLocation": "na1"})
		},
	})
}
