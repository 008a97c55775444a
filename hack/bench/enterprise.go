package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/mcp/dpop"
	"latchkey.dev/latchkey/webhook/idjag"
)

// The enterprise scenarios, beside client_credentials: the same request with a DPoP proof, and
// the JWT bearer grant redeeming ID-JAGs (docs/enterprise-idjag.md) from an identity provider
// the bench project trusts with inline keys. Both need a signature per request; the signing is
// the client's cost and is done in prepare, unmeasured, so what the run measures is the
// server's check.
const (
	// entAgent is the company's agent: it presents ID-JAGs with the JWT bearer grant.
	entAgentID     = "ent-agent"
	entAgentSecret = "lk_cs_bench-ent-agent-secret-0123456789abcdefghijklmno"
	benchIDP       = "https://idp.bench.example"
	benchIDPKid    = "idp-1"
)

// trustIDP declares the agent and the identity provider whose ID-JAGs the project redeems, for
// the people of bench.example (the password people the fixture seeds); it returns the
// provider's signing key.
func trustIDP(p *config.Project) (*ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	p.Clients[entAgentID] = &config.Client{ID: entAgentID, SecretHash: secret.Hash(entAgentSecret), Name: "Company agent",
		RedirectURIs: []string{"http://127.0.0.1/cb"}, GrantTypes: []string{idjag.GrantJWTBearer},
		Scopes: []string{"read"}, TokenEndpointAuthMethod: "client_secret_basic"}
	p.IdentityAssertions.Issuers = map[string]*config.AssertionIssuer{benchIDP: {
		Issuer: benchIDP, Clients: []string{entAgentID},
		JWKS:    &jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: benchIDPKid, Algorithm: "ES256", Use: "sig"}}},
		Subject: config.AssertionSubjectEmail, EmailDomains: []string{"bench.example"},
	}}
	return key, nil
}

// mint makes n one-time values with one, on a few goroutines.
func mint(n int, one func(i int) (string, error)) ([]string, error) {
	out := make([]string, n)
	var wg sync.WaitGroup
	var failed atomic.Value
	const minters = 4
	for m := range minters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := m; i < n; i += minters {
				v, err := one(i)
				if err != nil {
					failed.Store(err)
					return
				}
				out[i] = v
			}
		}()
	}
	wg.Wait()
	if err, ok := failed.Load().(error); ok {
		return nil, err
	}
	return out, nil
}

// pool hands each value out once; then errExhausted.
func pool(items []string) func() (string, error) {
	var n atomic.Int64
	return func() (string, error) {
		i := n.Add(1) - 1
		if i >= int64(len(items)) {
			return "", errExhausted
		}
		return items[i], nil
	}
}

// prepareClientCredentialsDPoP is client_credentials with an ES256 DPoP proof on every
// request (RFC 9449): the token comes back bound to the key. Proofs are accepted a minute either
// side of their iat, so they are dated the middle of the run.
func prepareClientCredentialsDPoP(_ context.Context, f *fixture, c *http.Client, _, hint int) (func(int) op, error) {
	span := f.o.warmup + f.o.duration
	if span > 2*dpop.DefaultWindow {
		return nil, fmt.Errorf("DPoP proofs are accepted %s either side of their iat: keep -warmup + -duration within %s", dpop.DefaultWindow, 2*dpop.DefaultWindow)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	iat := time.Now().Add(span / 2)
	proofs, err := mint(hint, func(int) (string, error) {
		return dpop.Sign(key, dpop.Claims{Method: http.MethodPost, URL: f.issuer + "/token", IssuedAt: iat})
	})
	if err != nil {
		return nil, fmt.Errorf("signing proofs: %w", err)
	}
	next := pool(proofs)
	body := "grant_type=client_credentials&scope=read"
	return func(int) op {
		return func(ctx context.Context) error {
			proof, err := next()
			if err != nil {
				return err
			}
			req := post(ctx, f.issuer+"/token", body, svcID, svcSecret)
			req.Header.Set("DPoP", proof)
			resp, err := send(c, req, http.StatusOK)
			if err == nil && !strings.Contains(string(resp), `"token_type":"DPoP"`) {
				err = fmt.Errorf("not a DPoP-bound token: %s", resp)
			}
			return err
		}
	}, nil
}

// prepareJWTBearer redeems ID-JAGs, each with its own jti, for the seeded people in turn.
func prepareJWTBearer(_ context.Context, f *fixture, c *http.Client, _, hint int) (func(int) op, error) {
	if f.idpKey == nil {
		return nil, errors.New("the project trusts no identity provider")
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: f.idpKey},
		(&jose.SignerOptions{}).WithType(idjag.Typ).WithHeader("kid", benchIDPKid))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	bodies, err := mint(hint, func(i int) (string, error) {
		claims, _ := json.Marshal(map[string]any{
			"iss": benchIDP, "sub": f.people[i%len(f.people)], "email": f.people[i%len(f.people)] + "@bench.example",
			"aud": f.issuer, "client_id": entAgentID, "jti": secret.New(""), "scope": "read",
			"iat": now.Unix(), "exp": now.Add(10 * time.Minute).Unix(),
		})
		jws, err := signer.Sign(claims)
		if err != nil {
			return "", err
		}
		a, err := jws.CompactSerialize()
		return url.Values{"grant_type": {idjag.GrantJWTBearer}, "assertion": {a}}.Encode(), err
	})
	if err != nil {
		return nil, fmt.Errorf("signing ID-JAGs: %w", err)
	}
	next := pool(bodies)
	return func(int) op {
		return func(ctx context.Context) error {
			body, err := next()
			if err != nil {
				return err
			}
			_, err = send(c, post(ctx, f.issuer+"/token", body, entAgentID, entAgentSecret), http.StatusOK)
			return err
		}
	}, nil
}
