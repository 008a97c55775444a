package signin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	jose "github.com/go-jose/go-jose/v4"

	"latchkey.dev/latchkey/internal/jwks"
)

// The sign-in provider's keys (ID tokens at sign-in and re-check, back-channel logout tokens).
// go-oidc's own key set fetches the provider's keys again whenever a token names a key id it
// lacks or carries a signature none of its keys makes, which anyone who can post a logout token
// can send as fast as they like: every such request to Latchkey became a request to the
// provider. providerKeys fetches again for such a token at most once per providerRefetchEvery,
// and otherwise refuses it without a fetch; a provider that rotates its keys publishes the new
// one before signing with it, so a rotation is picked up within that interval.
const (
	providerRefetchEvery = time.Minute
	maxProviderJWKSBytes = 256 << 10
	// maxProviderKeys bounds the provider's set; large providers publish a handful.
	maxProviderKeys = 64
)

// providerAlgs are the algorithms go-oidc verifies ID tokens with.
var providerAlgs = []jose.SignatureAlgorithm{
	jose.RS256, jose.RS384, jose.RS512, jose.ES256, jose.ES384, jose.ES512, jose.PS256, jose.PS384, jose.PS512, jose.EdDSA,
}

// provider is a discovered sign-in provider whose Verifier checks signatures with
// providerKeys instead of go-oidc's key set.
type provider struct {
	*oidc.Provider
	issuer string
	algs   []string
	keys   *providerKeys
}

func newProvider(p *oidc.Provider, client *http.Client, now func() time.Time) (*provider, error) {
	var md struct {
		Issuer  string   `json:"issuer"`
		JWKSURI string   `json:"jwks_uri"`
		Algs    []string `json:"id_token_signing_alg_values_supported"`
	}
	if err := p.Claims(&md); err != nil {
		return nil, err
	}
	if md.JWKSURI == "" {
		return nil, errors.New("the provider's discovery document names no jwks_uri")
	}
	var algs []string
	for _, a := range md.Algs {
		for _, s := range providerAlgs {
			if a == string(s) {
				algs = append(algs, a)
			}
		}
	}
	return &provider{Provider: p, issuer: md.Issuer, algs: algs, keys: newProviderKeys(md.JWKSURI, client, now)}, nil
}

// Verifier is go-oidc's verifier of the provider's tokens with the bounded key set; the
// algorithms are those the provider announces (RS256 when it announces none), as go-oidc's own.
func (p *provider) Verifier(config *oidc.Config) *oidc.IDTokenVerifier {
	if len(config.SupportedSigningAlgs) == 0 && len(p.algs) > 0 {
		cp := *config
		cp.SupportedSigningAlgs = p.algs
		config = &cp
	}
	return oidc.NewVerifier(p.issuer, p.keys, config)
}

// providerKeys is the provider's key set (oidc.KeySet), fetched and kept by internal/jwks: kept
// as long as the discovered provider, fetched again when a token needs a key it lacks, at most
// once per providerRefetchEvery.
type providerKeys struct {
	uri string
	set *jwks.Fetcher
}

func newProviderKeys(uri string, client *http.Client, now func() time.Time) *providerKeys {
	return &providerKeys{uri: uri, set: jwks.New(jwks.Options{
		Client: client, AllowHTTP: true, Timeout: upstreamTimeout, MaxBytes: maxProviderJWKSBytes,
		MaxKeys: maxProviderKeys, TTL: providerTTL, MinRefresh: providerRefetchEvery, Now: now,
	})}
}

var errNoProviderKey = errors.New("no key of the provider verifies the token")

// VerifySignature implements oidc.KeySet.
func (k *providerKeys) VerifySignature(ctx context.Context, raw string) ([]byte, error) {
	jws, err := jose.ParseSignedCompact(raw, providerAlgs)
	if err != nil {
		return nil, fmt.Errorf("malformed jwt: %w", err)
	}
	if len(jws.Signatures) != 1 {
		return nil, errors.New("the token must carry exactly one signature")
	}
	h := jws.Signatures[0].Header
	if set, err := k.set.Get(ctx, k.uri); err == nil {
		if payload, ok := verifyWithSet(jws, set, h.KeyID, h.Algorithm); ok {
			return payload, nil
		}
	}
	set, err := k.set.Refresh(ctx, k.uri)
	if err != nil {
		return nil, fmt.Errorf("fetching the provider's keys: %w", err)
	}
	if payload, ok := verifyWithSet(jws, set, h.KeyID, h.Algorithm); ok {
		return payload, nil
	}
	return nil, errNoProviderKey
}

// verifyWithSet checks the signature with the set's keys for the token's key id and algorithm
// (jwks.Select).
func verifyWithSet(jws *jose.JSONWebSignature, set *jose.JSONWebKeySet, kid, alg string) ([]byte, bool) {
	for _, key := range jwks.Select(set, kid, alg) {
		if payload, err := jws.Verify(&key); err == nil {
			return payload, true
		}
	}
	return nil, false
}
