package fakeoauth

import (
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Microsoft identity platform v2.0 for an app of many tenants (the common endpoints): the
// discovery document's issuer is https://{host}/{tenantid}/v2.0, and each ID token's iss names
// the tenant its tid claim names; oid and preferred_username come with the profile scope; a
// refresh token comes only for the offline_access scope, and every refresh answers with a new
// one (the fake ends the one used); errors carry AADSTS codes in error_description and
// error_codes; no revocation endpoint. The account is the ID token's oid, which Graph's /me
// calls id (served too). With Options.ClientAssertion the token endpoint takes a certificate
// credential (private_key_jwt with x5t#S256) instead of a client secret. ForgeIDToken makes
// the next ID token say what a hostile tenant would.
//
//   - https://learn.microsoft.com/entra/identity-platform/v2-oauth2-auth-code-flow
//   - https://learn.microsoft.com/entra/identity-platform/id-token-claims-reference
//   - https://learn.microsoft.com/entra/identity-platform/v2-protocols-oidc (the common
//     discovery document and its {tenantid} issuer)
//   - https://learn.microsoft.com/entra/identity-platform/certificate-credentials
//   - https://learn.microsoft.com/entra/identity-platform/refresh-tokens
//   - https://learn.microsoft.com/graph/api/user-get
//
// Not confirmed there: that the refresh token used stops working at once (Microsoft documents
// that each refresh returns a new one and that apps should use it); the AADSTS texts are
// abbreviated. ID tokens are dated by the wall clock, since Latchkey checks their expiry by it.
const Microsoft Shape = "microsoft"

// MicrosoftTenant is the directory (tenant) id of the fake's people.
const MicrosoftTenant = "72f988bf-86f1-41af-91ab-2d7cd011db47"

func init() {
	register(&Provider{
		Shape:          Microsoft,
		Tenant:         "common",
		Paths:          Paths{"/common/oauth2/v2.0/authorize", "/common/oauth2/v2.0/token", "/v1.0/me", ""},
		TokenPrefix:    "eyJ0eXAiOiJKV1Qi.",
		ClientAuth:     "post",
		RotatesRefresh: true,
		Authorize: func(q url.Values) (string, string) {
			scope := q.Get("scope")
			if !strings.Contains(" "+scope+" ", " openid ") {
				return "", "AADSTS900144: the openid scope is needed for an ID token"
			}
			if strings.Contains(" "+scope+" ", " offline_access ") {
				scope += offlineMark
			}
			return scope, ""
		},
		CheckToken: func(w http.ResponseWriter, req Request) bool {
			if req.ContentType != "application/x-www-form-urlencoded" || req.ClientAuth == "basic" || req.ClientAuth == "both" {
				microsoftError(w, http.StatusBadRequest, "invalid_request", 900144, "AADSTS900144: The request body must contain the following parameter: 'client_id'.")
				return false
			}
			return true
		},
		TokenError: func(w http.ResponseWriter, code string, refresh bool) {
			switch {
			case code == "invalid_client":
				microsoftError(w, http.StatusUnauthorized, code, 7000215, "AADSTS7000215: Invalid client secret provided.")
			case refresh:
				microsoftError(w, http.StatusBadRequest, "invalid_grant", 70000, "AADSTS70000: The provided value for the 'refresh_token' is not valid.")
			default:
				microsoftError(w, http.StatusBadRequest, code, 70008, "AADSTS70008: The provided authorization code or refresh token has expired or been revoked.")
			}
		},
		Answer: func(is Issued, a Account) map[string]any {
			scope, _ := offline(is.Scope)
			out := withoutRefresh(map[string]any{"token_type": "Bearer", "scope": scope, "expires_in": is.ExpiresIn,
				"ext_expires_in": is.ExpiresIn, "access_token": is.Access, "refresh_token": is.Refresh}, is)
			now := time.Now()
			claims := map[string]any{"iss": is.Base + "/" + MicrosoftTenant + "/v2.0", "tid": MicrosoftTenant, "aud": clientIDOf(is),
				"sub": "pairwise-" + a.ID, "oid": a.ID, "preferred_username": a.Email, "name": a.Name, "ver": "2.0",
				"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(time.Hour).Unix()}
			for k, v := range is.Forged {
				claims[k] = v
			}
			out["id_token"] = is.Sign(claims)
			return out
		},
		UserInfo: func(w http.ResponseWriter, r *http.Request, req Request, a Account, ok bool) {
			if !ok {
				writeJSON(w, http.StatusUnauthorized, map[string]any{"error": map[string]any{"code": "InvalidAuthenticationToken", "message": "Access token validation failure."}})
				return
			}
			writeJSON(w, http.StatusOK, map[string]any{"id": a.ID, "displayName": a.Name, "mail": a.Email, "userPrincipalName": a.Email})
		},
		Extra: map[string]func(*Server, http.ResponseWriter, *http.Request){
			"/common/v2.0/.well-known/openid-configuration": func(s *Server, w http.ResponseWriter, r *http.Request) {
				base := "http://" + r.Host
				writeJSON(w, http.StatusOK, map[string]any{"issuer": base + "/{tenantid}/v2.0",
					"authorization_endpoint": base + "/common/oauth2/v2.0/authorize", "token_endpoint": base + "/common/oauth2/v2.0/token",
					"jwks_uri": base + "/common/discovery/v2.0/keys", "response_types_supported": []string{"code", "id_token"},
					"subject_types_supported": []string{"pairwise"}, "id_token_signing_alg_values_supported": []string{"RS256"},
					"tenant_region_scope": nil, "cloud_instance_name": "microsoftonline.com"})
			},
			"/common/discovery/v2.0/keys": ServeJWKS,
		},
	})
}

// clientIDOf is the audience of an ID token: the client the fake was made for, carried on the
// Issued answer as the token request named it.
func clientIDOf(is Issued) string { return is.ClientID }

func microsoftError(w http.ResponseWriter, status int, code string, aadsts int, desc string) {
	writeJSON(w, status, map[string]any{"error": code, "error_description": desc, "error_codes": []int{aadsts},
		"timestamp": "2026-12-02 04:00:00Z", "trace_id": "00000000-0000-0000-0000-000000000000", "correlation_id": "00000000-0000-0000-0000-000000000000"})
}
