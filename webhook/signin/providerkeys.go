package signin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	jose "github.com/go-jose/go-jose/v4"

	"latchkey.dev/latchkey/internal/netguard"
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
	return &provider{Provider: p, issuer: md.Issuer, algs: algs, keys: &providerKeys{uri: md.JWKSURI, client: client, now: now}}, nil
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

// providerKeys is the provider's key set (oidc.KeySet), fetched when a token needs a key it
// lacks, at most once per providerRefetchEvery.
type providerKeys struct {
	uri    string
	client *http.Client
	now    func() time.Time

	mu    sync.Mutex // held while fetching, so concurrent misses fetch once
	set   *jose.JSONWebKeySet
	tried time.Time
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
	kid := jws.Signatures[0].Header.KeyID
	k.mu.Lock()
	set := k.set
	k.mu.Unlock()
	if payload, ok := verifyWithSet(jws, set, kid); ok {
		return payload, nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.set == set { // nobody fetched while this one was checked
		if !k.tried.IsZero() && k.now().Sub(k.tried) < providerRefetchEvery {
			return nil, errNoProviderKey
		}
		if err := k.fetch(ctx); err != nil {
			return nil, err
		}
	}
	if payload, ok := verifyWithSet(jws, k.set, kid); ok {
		return payload, nil
	}
	return nil, errNoProviderKey
}

// verifyWithSet checks the signature with the set's key of that id (any of its keys when the
// token names none).
func verifyWithSet(jws *jose.JSONWebSignature, set *jose.JSONWebKeySet, kid string) ([]byte, bool) {
	if set == nil {
		return nil, false
	}
	for i := range set.Keys {
		key := &set.Keys[i]
		if (kid != "" && key.KeyID != kid) || (key.Use != "" && key.Use != "sig") {
			continue
		}
		if payload, err := jws.Verify(key); err == nil {
			return payload, true
		}
	}
	return nil, false
}

// fetch reads the key set; a failure keeps the set it had, and counts as a try.
func (k *providerKeys) fetch(ctx context.Context) error {
	k.tried = k.now()
	ctx, cancel := context.WithTimeout(ctx, upstreamTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.uri, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/jwk-set+json, application/json")
	resp, err := k.client.Do(req)
	if err != nil {
		return fmt.Errorf("fetching the provider's keys: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("fetching the provider's keys: %s answered %d", k.uri, resp.StatusCode)
	}
	body, err := netguard.ReadAtMost(resp.Body, maxProviderJWKSBytes)
	if err != nil {
		return fmt.Errorf("fetching the provider's keys: %w", err)
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(body, &set); err != nil {
		return fmt.Errorf("the provider's keys do not parse: %w", err)
	}
	k.set = &set
	return nil
}
