package main

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook/exchange"
	"latchkey.dev/latchkey/webhook/links"
	"latchkey.dev/latchkey/webhook/signin"
)

// scenario is one kind of request. prepare runs before each run, unmeasured, and returns the
// operation each worker repeats.
type scenario struct {
	name string
	what string
	// prepare may use hint, the number of operations the run is expected to need, to mint
	// one-time material (authorization codes).
	prepare func(ctx context.Context, f *fixture, c *http.Client, conc, hint int) (func(worker int) op, error)
}

// scenarios in the order they run: reads first, so that the tokens the write scenarios add do
// not change the size of the table the reads see (the scaling check compares reads too).
var scenarios = []scenario{
	{"floor", "bare net/http: ReadForm + Basic + hash + one indexed read (GetToken)", prepareFloor},
	{"floor_insert", "bare net/http: ReadForm + Basic + secret hash check + one token stored (CreateTokens)", prepareFloorInsert(func(f *fixture) string { return f.floorInsertURL })},
	{"floor_insert_alone", "floor_insert on a SQLite file of its own whose store commits each insert alone (no group commit); on PostgreSQL the same as floor_insert", prepareFloorInsert(func(f *fixture) string { return f.floorInsertAloneURL })},
	{"introspection", "RFC 7662, confidential client, active access token from the seeded set", prepareIntrospection},
	{"exchange_ok", "RFC 8693 token exchange answered from the vault (sealed GitHub token, not expired)", prepareExchange(true)},
	{"exchange_refused", "RFC 8693 token exchange refused with the person's open connect link", prepareExchange(false)},
	{"link_page", "GET the connect link page as its person (session cookie, signed in recently): 200", prepareLinkPage},
	{"link_404", "GET a connect link with an unknown code: the uniform 404 page", prepareLink404},
	{"client_credentials", "client_credentials, client_secret_basic, one token stored", prepareClientCredentials},
	{"client_credentials_dpop", "client_credentials with an ES256 DPoP proof (pre-signed): proof checked, jti recorded, token bound", prepareClientCredentialsDPoP},
	{"jwt_bearer", "JWT bearer grant redeeming an ID-JAG (ES256, inline keys, pre-signed): jti recorded, person found, token stored", prepareJWTBearer},
	{"authorization_code", "authorization_code redeem with PKCE (pre-minted codes): access + refresh token stored", prepareAuthCode},
	{"refresh", "refresh_token rotation (one chain per client): retire old, store new pair", prepareRefresh},
}

func scenarioNames() []string {
	var out []string
	for _, s := range scenarios {
		out = append(out, s.name)
	}
	return out
}

// post builds a token-endpoint style request.
func post(ctx context.Context, u, body, user, pass string) *http.Request {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(user, pass)
	return req
}

func exchangeForm(subject string) string {
	return url.Values{
		"grant_type":           {exchange.GrantType},
		"subject_token":        {subject},
		"subject_token_type":   {exchange.TokenTypeAccessToken},
		"requested_token_type": {exchange.TokenTypeAccessToken},
		"audience":             {githubAudience},
	}.Encode()
}

// roundRobin hands out items to workers in turn.
func roundRobin(items []string) func() string {
	var n atomic.Uint64
	return func() string { return items[(n.Add(1)-1)%uint64(len(items))] }
}

func prepareFloor(_ context.Context, f *fixture, c *http.Client, _, _ int) (func(int) op, error) {
	bodies := make([]string, len(f.connectedTokens))
	for i, t := range f.connectedTokens {
		bodies[i] = exchangeForm(t.token)
	}
	next := roundRobin(bodies)
	return func(int) op {
		return func(ctx context.Context) error {
			_, err := send(c, post(ctx, f.floorURL, next(), agentID, agentSecret), http.StatusOK)
			return err
		}
	}, nil
}

// prepareFloorInsert posts client_credentials to the one-insert floor at where(f).
func prepareFloorInsert(where func(*fixture) string) func(context.Context, *fixture, *http.Client, int, int) (func(int) op, error) {
	return func(_ context.Context, f *fixture, c *http.Client, _, _ int) (func(int) op, error) {
		body := "grant_type=client_credentials&scope=read"
		return func(int) op {
			return func(ctx context.Context) error {
				_, err := send(c, post(ctx, where(f), body, svcID, svcSecret), http.StatusOK)
				return err
			}
		}, nil
	}
}

func prepareClientCredentials(_ context.Context, f *fixture, c *http.Client, _, _ int) (func(int) op, error) {
	body := "grant_type=client_credentials&scope=read"
	return func(int) op {
		return func(ctx context.Context) error {
			_, err := send(c, post(ctx, f.issuer+"/token", body, svcID, svcSecret), http.StatusOK)
			return err
		}
	}, nil
}

func prepareIntrospection(_ context.Context, f *fixture, c *http.Client, _, _ int) (func(int) op, error) {
	if len(f.sample) == 0 {
		return nil, errors.New("no seeded access tokens to introspect (-tokens 0?)")
	}
	bodies := make([]string, len(f.sample))
	for i, t := range f.sample {
		bodies[i] = "token=" + url.QueryEscape(t)
	}
	next := roundRobin(bodies)
	return func(int) op {
		return func(ctx context.Context) error {
			body, err := send(c, post(ctx, f.issuer+"/introspect", next(), svcID, svcSecret), http.StatusOK)
			if err == nil && !strings.Contains(string(body), `"active":true`) {
				err = fmt.Errorf("inactive: %s", body)
			}
			return err
		}
	}, nil
}

func prepareExchange(succeeds bool) func(context.Context, *fixture, *http.Client, int, int) (func(int) op, error) {
	return func(_ context.Context, f *fixture, c *http.Client, _, _ int) (func(int) op, error) {
		src, want := f.connectedTokens, http.StatusOK
		if !succeeds {
			src, want = f.unconnectedTokens, http.StatusBadRequest
		}
		bodies := make([]string, len(src))
		for i, t := range src {
			bodies[i] = exchangeForm(t.token)
		}
		next := roundRobin(bodies)
		return func(int) op {
			return func(ctx context.Context) error {
				body, err := send(c, post(ctx, f.issuer+"/token", next(), agentID, agentSecret), want)
				if err == nil && !succeeds && !strings.Contains(string(body), `"connect_required"`) {
					err = fmt.Errorf("not a connect_required refusal: %s", body)
				}
				return err
			}
		}, nil
	}
}

// prepareLinkPage signs people in (a session made as sign-in makes it, now) and opens their
// connect links, so each GET passes all five checks and renders the offer.
func prepareLinkPage(ctx context.Context, f *fixture, c *http.Client, conc, _ int) (func(int) op, error) {
	env := f.srv.Env()
	gh := f.project.ConnectorsByAudience[githubAudience]
	cookieName := signin.CookieName(env, f.project, "session")
	now := time.Now()
	type visit struct{ uri, cookie string }
	var visits []visit
	for _, person := range f.unconnected[:min(len(f.unconnected), 64)] {
		v := secret.New("")
		if err := f.st.CreateSession(ctx, store.Session{IDHash: secret.Hash(v), Project: projectKey, Subject: person,
			AuthTime: now, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
			return nil, err
		}
		offer, err := links.Open(ctx, env, f.st, f.project, links.Request{Subject: person, Agent: agentID, Connector: gh, Kind: store.LinkConnect}, now)
		if err != nil {
			return nil, err
		}
		visits = append(visits, visit{offer.URI, cookieName + "=" + v})
	}
	var n atomic.Uint64
	return func(int) op {
		return func(ctx context.Context) error {
			v := visits[(n.Add(1)-1)%uint64(len(visits))]
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, v.uri, nil)
			req.Header.Set("Cookie", v.cookie)
			body, err := send(c, req, http.StatusOK)
			if err == nil && !strings.Contains(string(body), "Connect your GitHub account") {
				err = errors.New("the link page did not offer to connect")
			}
			return err
		}
	}, nil
}

func prepareLink404(_ context.Context, f *fixture, c *http.Client, _, _ int) (func(int) op, error) {
	uris := make([]string, 1024)
	for i := range uris {
		uris[i] = f.issuer + links.PathPrefix + secret.New("")
	}
	next := roundRobin(uris)
	return func(int) op {
		return func(ctx context.Context) error {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, next(), nil)
			_, err := send(c, req, http.StatusNotFound)
			return err
		}
	}, nil
}

// prepareAuthCode mints hint codes through the store, as consent would, for the web client.
func prepareAuthCode(ctx context.Context, f *fixture, c *http.Client, _, hint int) (func(int) op, error) {
	verifier := secret.New("") + secret.New("")[:10]
	sum := sha256.Sum256([]byte(verifier))
	challenge := base64.RawURLEncoding.EncodeToString(sum[:])
	now := time.Now()
	bodies := make([]string, hint)
	var wg sync.WaitGroup
	var failed atomic.Value
	const minters = 8
	for m := range minters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := m; i < hint; i += minters {
				code := secret.New(secret.PrefixCode)
				if err := f.st.CreateAuthCode(ctx, store.AuthCode{
					Hash: secret.Hash(code), Project: projectKey, ClientID: webID, Subject: f.people[i%len(f.people)],
					RedirectURI: webRedirect, Scopes: []string{"read"}, CodeChallenge: challenge, CodeChallengeMethod: "S256",
					AuthTime: now, ExpiresAt: now.Add(time.Hour), CreatedAt: now,
				}); err != nil {
					failed.Store(err)
					return
				}
				bodies[i] = url.Values{"grant_type": {"authorization_code"}, "code": {code},
					"redirect_uri": {webRedirect}, "code_verifier": {verifier}}.Encode()
			}
		}()
	}
	wg.Wait()
	if err, ok := failed.Load().(error); ok {
		return nil, fmt.Errorf("minting codes: %w", err)
	}
	var n atomic.Int64
	return func(int) op {
		return func(ctx context.Context) error {
			i := n.Add(1) - 1
			if i >= int64(len(bodies)) {
				return errExhausted
			}
			_, err := send(c, post(ctx, f.issuer+"/token", bodies[i], webID, webSecret), http.StatusOK)
			return err
		}
	}, nil
}

// prepareRefresh gives every worker its own refresh token; each request presents the one the
// previous response returned, as a client does.
func prepareRefresh(ctx context.Context, f *fixture, c *http.Client, conc, _ int) (func(int) op, error) {
	now := time.Now()
	start := make([]string, conc)
	for w := range conc {
		rt := secret.New(secret.PrefixRefreshToken)
		if err := f.st.CreateTokens(ctx, store.Token{
			Hash: secret.Hash(rt), Kind: store.RefreshToken, Project: projectKey, ClientID: webID,
			Subject: f.people[w%len(f.people)], Scopes: []string{"read"}, FamilyID: secret.New("")[:22],
			AuthTime: now, IssuedAt: now, ExpiresAt: now.Add(24 * time.Hour),
		}); err != nil {
			return nil, err
		}
		start[w] = rt
	}
	// The chain's head lives in start[w], not in the closure: warm-up and measurement are two
	// drives, and the second must present what the first was last given.
	return func(w int) op {
		rt := &start[w]
		return func(ctx context.Context) error {
			body, err := send(c, post(ctx, f.issuer+"/token", "grant_type=refresh_token&refresh_token="+url.QueryEscape(*rt), webID, webSecret), http.StatusOK)
			if err != nil {
				return err
			}
			var resp struct {
				RefreshToken string `json:"refresh_token"`
			}
			if err := json.Unmarshal(body, &resp); err != nil || resp.RefreshToken == "" {
				return fmt.Errorf("no refresh token in %s", body)
			}
			*rt = resp.RefreshToken
			return nil
		}
	}, nil
}
