package controllers

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	jose "github.com/go-jose/go-jose/v4"

	v1alpha1 "latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/internal/config"
)

// compileIdentityAssertions compiles spec.identityAssertions (webhook/idjag). An inline jwks
// that does not parse turns off only that issuer, as a broken Secret turns off its feature:
// the Project keeps serving and Degraded says which issuer and why.
func (r *resolver) compileIdentityAssertions(_ context.Context, p *v1alpha1.Project, out *config.Project, off *degraded) error {
	ia := p.Spec.IdentityAssertions
	if ia == nil {
		return nil
	}
	res := config.IdentityAssertions{
		Issuers:   map[string]*config.AssertionIssuer{},
		Audiences: map[string]*config.AssertionAudience{},
		Lifetime:  config.DefaultAssertionLifetime,
	}
	if ia.Lifetime != nil {
		res.Lifetime = ia.Lifetime.Duration
	}
	for _, ti := range ia.TrustedIssuers {
		iss := &config.AssertionIssuer{
			Issuer:          string(ti.Issuer),
			JWKSURI:         string(ti.JWKSURI),
			Subject:         cmp.Or(string(ti.Subject), config.AssertionSubjectSub),
			CreatePeople:    ti.CreatePeople,
			AllowedNetworks: allowedNetworks(p),
		}
		for _, c := range ti.Clients {
			if c == "*" {
				iss.AllClients = true
				continue
			}
			iss.Clients = append(iss.Clients, c)
		}
		for _, d := range ti.EmailDomains {
			iss.EmailDomains = append(iss.EmailDomains, strings.ToLower(d))
		}
		if ti.JWKS != "" {
			set, err := parsePublicJWKS(ti.JWKS)
			if err != nil {
				if _, err := off.add(notReadyf(v1alpha1.ProjectIdentityAssertionKeysInvalidReason,
					"spec.identityAssertions.trustedIssuers[%s].jwks: %v", ti.Issuer, err), "ID-JAGs of "+string(ti.Issuer)); err != nil {
					return err
				}
				continue
			}
			iss.JWKS = set
		}
		res.Issuers[iss.Issuer] = iss
	}
	for _, a := range ia.Audiences {
		aud := &config.AssertionAudience{Issuer: string(a.Issuer), Clients: map[string]config.AssertionClient{}}
		for _, c := range a.Clients {
			aud.Clients[c.ClientID] = config.AssertionClient{ResourceClientID: cmp.Or(c.ResourceClientID, c.ClientID)}
		}
		for _, s := range a.Scopes {
			aud.Scopes = append(aud.Scopes, string(s))
		}
		for _, u := range a.Resources {
			aud.Resources = append(aud.Resources, string(u))
		}
		res.Audiences[aud.Issuer] = aud
	}
	out.IdentityAssertions = res
	return nil
}

// parsePublicJWKS reads a JSON Web Key Set and keeps its public halves; a set with no usable
// key is an error, so a paste of the wrong thing is reported rather than refusing quietly.
func parsePublicJWKS(s string) (*jose.JSONWebKeySet, error) {
	var set jose.JSONWebKeySet
	if err := json.Unmarshal([]byte(s), &set); err != nil {
		return nil, fmt.Errorf("not a JSON Web Key Set: %w", err)
	}
	pub := &jose.JSONWebKeySet{}
	for _, k := range set.Keys {
		if !k.Valid() {
			continue
		}
		pk := k.Public()
		if !pk.Valid() {
			continue
		}
		pub.Keys = append(pub.Keys, pk)
	}
	if len(pub.Keys) == 0 {
		return nil, fmt.Errorf("no usable public key")
	}
	return pub, nil
}
