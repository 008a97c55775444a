package oauth

import (
	"encoding/json"
	"net/http"
	"slices"
	"sort"

	jose "github.com/go-jose/go-jose/v4"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/dpop"
	"latchkey.dev/latchkey/webhook/site"
)

// ServerMetadata is RFC 8414 authorization server metadata, also served as OpenID Connect
// discovery.
type ServerMetadata struct {
	Issuer                                     string   `json:"issuer"`
	AuthorizationEndpoint                      string   `json:"authorization_endpoint"`
	TokenEndpoint                              string   `json:"token_endpoint"`
	RegistrationEndpoint                       string   `json:"registration_endpoint,omitempty"`
	RevocationEndpoint                         string   `json:"revocation_endpoint"`
	IntrospectionEndpoint                      string   `json:"introspection_endpoint"`
	UserinfoEndpoint                           string   `json:"userinfo_endpoint"`
	JWKSURI                                    string   `json:"jwks_uri"`
	ScopesSupported                            []string `json:"scopes_supported"`
	ResponseTypesSupported                     []string `json:"response_types_supported"`
	ResponseModesSupported                     []string `json:"response_modes_supported"`
	GrantTypesSupported                        []string `json:"grant_types_supported"`
	CodeChallengeMethodsSupported              []string `json:"code_challenge_methods_supported"`
	TokenEndpointAuthMethodsSupported          []string `json:"token_endpoint_auth_methods_supported"`
	TokenEndpointAuthSigningAlgValuesSupported []string `json:"token_endpoint_auth_signing_alg_values_supported"`
	RevocationEndpointAuthMethodsSupported     []string `json:"revocation_endpoint_auth_methods_supported"`
	IntrospectionEndpointAuthMethodsSupported  []string `json:"introspection_endpoint_auth_methods_supported"`
	AuthorizationResponseIssParameterSupported bool     `json:"authorization_response_iss_parameter_supported"`
	ClientIDMetadataDocumentSupported          bool     `json:"client_id_metadata_document_supported"`
	SubjectTypesSupported                      []string `json:"subject_types_supported"`
	IDTokenSigningAlgValuesSupported           []string `json:"id_token_signing_alg_values_supported,omitempty"`
	ClaimsSupported                            []string `json:"claims_supported"`
	PromptValuesSupported                      []string `json:"prompt_values_supported"`
	// PushedAuthorizationRequestEndpoint and RequirePushedAuthorizationRequests: RFC 9126 §5.
	PushedAuthorizationRequestEndpoint string `json:"pushed_authorization_request_endpoint"`
	RequirePushedAuthorizationRequests bool   `json:"require_pushed_authorization_requests"`
	// DPoPSigningAlgValuesSupported is exactly what the proof verifier accepts (RFC 9449 §5.1).
	DPoPSigningAlgValuesSupported []string `json:"dpop_signing_alg_values_supported"`
	// Backchannel*: OpenID CIBA Core §4, when the ciba grant is served (docs/approvals.md).
	BackchannelAuthenticationEndpoint      string   `json:"backchannel_authentication_endpoint,omitempty"`
	BackchannelTokenDeliveryModesSupported []string `json:"backchannel_token_delivery_modes_supported,omitempty"`
	BackchannelUserCodeParameterSupported  *bool    `json:"backchannel_user_code_parameter_supported,omitempty"`
	// AuthorizationDetailsTypesSupported are the RFC 9396 types the Project declares (§10);
	// absent when it declares none.
	AuthorizationDetailsTypesSupported []string `json:"authorization_details_types_supported,omitempty"`
}

// authMethods are the client authentication methods every endpoint accepts; introspection all
// but the last, none.
var authMethods = []string{site.AuthClientSecretBasic, site.AuthClientSecretPost, site.AuthPrivateKeyJWT, site.AuthClientSecretJWT, site.AuthNone}

// DefaultScopes are offered by every project, on top of its clients' declared scopes.
var DefaultScopes = []string{"openid", "profile", "email"}

// Metadata describes the project's authorization server.
func Metadata(p *config.Project, grantTypes []string) ServerMetadata {
	iss := p.Issuer
	m := ServerMetadata{
		Issuer:                                     iss,
		AuthorizationEndpoint:                      iss + "/authorize",
		TokenEndpoint:                              iss + "/token",
		RevocationEndpoint:                         iss + "/revoke",
		IntrospectionEndpoint:                      iss + "/introspect",
		UserinfoEndpoint:                           iss + "/userinfo",
		JWKSURI:                                    iss + "/jwks.json",
		ScopesSupported:                            scopesSupported(p),
		ResponseTypesSupported:                     []string{"code"},
		ResponseModesSupported:                     []string{"query"},
		GrantTypesSupported:                        grantTypes,
		CodeChallengeMethodsSupported:              []string{"S256"},
		TokenEndpointAuthMethodsSupported:          authMethods,
		TokenEndpointAuthSigningAlgValuesSupported: AssertionSigningAlgs(),
		RevocationEndpointAuthMethodsSupported:     authMethods,
		IntrospectionEndpointAuthMethodsSupported:  authMethods[:len(authMethods)-1],
		AuthorizationResponseIssParameterSupported: true,
		ClientIDMetadataDocumentSupported:          p.Registration.ClientIDMetadataDocuments,
		SubjectTypesSupported:                      []string{"public"},
		ClaimsSupported:                            []string{"sub", "iss", "aud", "exp", "iat", "auth_time", "nonce", "email", "name"},
		PromptValuesSupported:                      []string{"none", "login", "consent"},
		DPoPSigningAlgValuesSupported:              slices.Clone(dpop.Algorithms),
		PushedAuthorizationRequestEndpoint:         iss + "/par",
		RequirePushedAuthorizationRequests:         p.RequirePAR,
		AuthorizationDetailsTypesSupported:         p.AuthorizationDetails.Names(),
	}
	if p.Registration.Mode != config.RegistrationClosed && p.Registration.Mode != "" {
		m.RegistrationEndpoint = iss + "/register"
	}
	if slices.Contains(grantTypes, site.GrantCIBA) {
		m.BackchannelAuthenticationEndpoint = iss + "/bc-authorize"
		m.BackchannelTokenDeliveryModesSupported = []string{"poll", "ping"}
		m.BackchannelUserCodeParameterSupported = new(bool)
	}
	for _, k := range p.SigningKeys {
		if !slices.Contains(m.IDTokenSigningAlgValuesSupported, k.Algorithm) {
			m.IDTokenSigningAlgValuesSupported = append(m.IDTokenSigningAlgValuesSupported, k.Algorithm)
		}
	}
	return m
}

func scopesSupported(p *config.Project) []string {
	out := slices.Clone(DefaultScopes)
	for _, c := range p.Clients {
		for _, s := range c.Scopes {
			if !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	sort.Strings(out[len(DefaultScopes):])
	return out
}

// metadata serves ServerMetadata for the request's project. Metadata holds nothing secret, so
// clients may cache it briefly.
func metadata(t *TokenEndpoint) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET")
			WriteError(w, ErrMethodNotAllowed.WithDescription("use GET"))
			return
		}
		writePublicJSON(w, Metadata(site.Project(r), t.GrantTypes()))
	}
}

// jwks publishes the public half of every signing key, current and previous, so tokens signed
// before a rotation still verify, and the next one before it signs. A retired key leaves once
// every token it signed has expired. Without keys it is an empty set.
func jwks(env *site.Env) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET")
			WriteError(w, ErrMethodNotAllowed.WithDescription("use GET"))
			return
		}
		p := site.Project(r)
		set := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{}}
		now := env.Now()
		for _, k := range p.SigningKeys {
			if !k.Published(now) {
				continue
			}
			pub, ok := publicKey(k)
			if !ok {
				continue
			}
			set.Keys = append(set.Keys, jose.JSONWebKey{Key: pub, KeyID: k.ID, Algorithm: k.Algorithm, Use: "sig"})
		}
		writePublicJSON(w, set)
	}
}

func writePublicJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		WriteError(w, Internal(err))
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "public, max-age=60")
	h.Del("Pragma")
	w.WriteHeader(http.StatusOK)
	w.Write(b)
}

// Endpoints are the core OAuth endpoints of every project.
type Endpoints struct {
	// Token is /token; further grant types register on it.
	Token *TokenEndpoint
	// Metadata serves RFC 8414 metadata for site.Project(r); the server also mounts it at the
	// root path-insertion form.
	Metadata http.Handler
}

// Register mounts /token, /revoke, /introspect, /userinfo, /jwks.json and both metadata
// documents under every issuer.
func Register(rt site.Router, env *site.Env, st Store) *Endpoints {
	t := NewTokenEndpoint(env, st)
	md := metadata(t)
	rt.API("/token", t)
	rt.API("/revoke", revoke(env, st))
	rt.API("/introspect", introspect(env, st))
	rt.API("/userinfo", userinfo(env, st))
	rt.API("/jwks.json", jwks(env))
	rt.API("/.well-known/oauth-authorization-server", md)
	rt.API("/.well-known/openid-configuration", md)
	return &Endpoints{Token: t, Metadata: md}
}
