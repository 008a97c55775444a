package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/subtle"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	_ "github.com/jackc/pgx/v5/stdlib" // PostgreSQL schema set-up
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/oauth2"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	sqlstore "latchkey.dev/latchkey/internal/store/sql"
	"latchkey.dev/latchkey/internal/upstream"
	"latchkey.dev/latchkey/internal/upstream/fakegithub"
	"latchkey.dev/latchkey/webhook"
	"latchkey.dev/latchkey/webhook/exchange"
	"latchkey.dev/latchkey/webhook/oauth"
)

// The project and its clients. Secrets are fixed: the harness is the only thing that talks to
// this server, on loopback, and it removes the database afterwards.
const (
	projectNS   = "bench"
	projectName = "demo"
	projectKey  = projectNS + "/" + projectName

	// svc is a confidential client acting for itself (client_credentials, introspection).
	svcID     = "svc"
	svcSecret = "lk_cs_bench-svc-secret-0123456789abcdefghijklmnopqrstuv"
	// web is a confidential web app (authorization_code with refresh tokens).
	webID       = "web"
	webSecret   = "lk_cs_bench-web-secret-0123456789abcdefghijklmnopqrstuv"
	webRedirect = "https://app.example/cb"
	// agent is Repo Helper: it exchanges people's tokens for their GitHub tokens.
	agentID     = "repo-helper"
	agentSecret = "lk_cs_bench-agent-secret-0123456789abcdefghijklmnopqrs"

	githubAudience = "github"
	githubLogin    = "bench-user"
	githubClientID = "Iv1.bench"
)

// fixture is one running installation with its seeded state.
type fixture struct {
	o       options
	st      *sqlstore.Store
	srv     *webhook.Server
	http    *http.Server
	floor   *http.Server
	project *config.Project
	issuer  string
	// floorURL is the bare handler's address.
	floorURL string
	// floorInsertURL is the one-insert floor's address (floorInsertHandler).
	floorInsertURL string
	// dsn is the store's.
	dsn string
	// floorInsertAloneURL is the same handler on a store that commits each insert alone.
	floorInsertAloneURL string
	// idpKey signs the ID-JAGs of the trusted identity provider (enterprise.go).
	idpKey *ecdsa.PrivateKey

	people []string // person ids
	// connected people have a GitHub account the agent may use; their access tokens (issued to
	// the agent) exchange successfully. The others' tokens are refused with a connect link.
	connectedTokens, unconnectedTokens []personToken
	unconnected                        []string
	// sample holds plaintexts of seeded access tokens, spread over the whole seeded set.
	sample []string

	cleanup []func()
}

type personToken struct{ person, token string }

func (f *fixture) close() {
	for i := len(f.cleanup) - 1; i >= 0; i-- {
		f.cleanup[i]()
	}
}

// database resolves -database: a temporary SQLite file by default; for PostgreSQL a fresh
// schema, chosen with search_path, dropped afterwards unless -keep.
func database(ctx context.Context, o options) (dsn, label string, cleanup func(), err error) {
	switch {
	case o.database == "":
		dir, err := os.MkdirTemp("", "latchkey-bench-")
		if err != nil {
			return "", "", nil, err
		}
		path := filepath.Join(dir, "latchkey.db")
		return "sqlite:" + path, "SQLite (" + path + ")", func() {
			if !o.keep {
				os.RemoveAll(dir)
			}
		}, nil
	case strings.HasPrefix(o.database, "sqlite:"):
		return o.database, "SQLite (" + strings.TrimPrefix(o.database, "sqlite:") + ")", func() {}, nil
	case strings.HasPrefix(o.database, "postgres://"), strings.HasPrefix(o.database, "postgresql://"):
		u, err := url.Parse(o.database)
		if err != nil {
			return "", "", nil, fmt.Errorf("-database: %w", err)
		}
		schema := fmt.Sprintf("bench_%d", time.Now().UnixNano())
		db, err := sql.Open("pgx", adminDSN(o.database))
		if err != nil {
			return "", "", nil, err
		}
		if _, err := db.ExecContext(ctx, `CREATE SCHEMA `+schema); err != nil {
			db.Close()
			return "", "", nil, fmt.Errorf("creating schema: %w", err)
		}
		q := u.Query()
		q.Set("search_path", schema)
		u.RawQuery = q.Encode()
		return u.String(), "PostgreSQL (" + u.Host + ", schema " + schema + ")", func() {
			if !o.keep {
				_, _ = db.Exec(`DROP SCHEMA ` + schema + ` CASCADE`) // best-effort cleanup of a throwaway schema
			}
			db.Close()
		}, nil
	}
	return "", "", nil, errors.New("-database must be empty, sqlite:/path or postgres://…")
}

// start opens the store, starts the fake GitHub, the server and the floor, all on loopback.
func start(ctx context.Context, o options, dsn string) (*fixture, error) {
	f := &fixture{o: o, dsn: dsn}
	ok := false
	defer func() {
		if !ok {
			f.close()
		}
	}()
	st, err := sqlstore.Open(ctx, dsn)
	if err != nil {
		return nil, err
	}
	f.st = st
	f.cleanup = append(f.cleanup, func() { st.Close() })

	listen := func() (net.Listener, string, error) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, "", err
		}
		return ln, "http://" + ln.Addr().String(), nil
	}

	// Latchkey's listener first: the connector's callback URL names it.
	ln, base, err := listen()
	if err != nil {
		return nil, err
	}
	f.issuer = base + "/" + projectKey
	// Connections are seeded with tokens that do not expire (as GitHub OAuth apps issue them),
	// so a successful exchange is served from the vault; the fake GitHub is the connector's
	// upstream all the same, and would answer a refresh.
	gh := fakegithub.New(fakegithub.Options{
		ClientID: githubClientID, ClientSecret: "bench-github-secret",
		Accounts:     []fakegithub.Account{{ID: 7, Login: githubLogin, Name: "Bench", Password: "bench"}},
		RedirectURIs: []string{f.issuer + config.CallbackPath("default", "github")},
	})
	ghLn, ghURL, err := listen()
	if err != nil {
		ln.Close()
		return nil, err
	}
	ghSrv := &http.Server{Handler: gh, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = ghSrv.Serve(ghLn) }() // returns http.ErrServerClosed after Close
	f.cleanup = append(f.cleanup, func() { ghSrv.Close() })
	connector := gh.Connector(ghURL, f.issuer+config.CallbackPath("default", "github"))

	f.project = benchProject(f.issuer, connector)
	if f.idpKey, err = trustIDP(f.project); err != nil {
		ln.Close()
		return nil, err
	}
	// Sessions and refresh tokens last only while their person is in the project's sign-in
	// sources; the bench people are password people whose hash never verifies (they never
	// sign in through the form: the fixture stores their sessions).
	f.project.SignIn.Passwords = make(map[string]config.PasswordUser, f.o.people)
	for i := range f.o.people {
		email := fmt.Sprintf("p-%07d@bench.example", i)
		f.project.SignIn.Passwords[email] = config.PasswordUser{Email: email, Name: "Person", Hash: "$2a$10$benchbenchbenchbenchbenchbenchbenchbenchbenchbenchben"}
	}
	holder := &config.Holder{}
	holder.Store(&config.Snapshot{Projects: map[string]*config.Project{projectKey: f.project}, Version: 1})

	// As cmd/latchkey wires it: JSON logs at info (discarded here, but formatted), security
	// events through the emitter.
	log := logr.FromSlogHandler(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo})) //nolint:sloglint // the bench pays for the formatting, which DiscardHandler skips
	emitter, err := events.NewEmitter(events.EmitterOptions{Store: st, Config: holder, Logger: log, Registerer: prometheus.NewRegistry()})
	if err != nil {
		ln.Close()
		return nil, err
	}
	f.srv, err = webhook.New(webhook.Options{
		Config: holder, Store: st, Keyring: secret.NewRandomKeyring(), Logger: log,
		Now: time.Now, PublicURL: base, Events: emitter.Recorded,
	})
	if err != nil {
		ln.Close()
		return nil, err
	}
	f.http = &http.Server{
		Handler:           f.srv,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
	go func() { _ = f.http.Serve(ln) }() // returns http.ErrServerClosed after Close
	f.cleanup = append(f.cleanup, func() { f.http.Close() })

	floorLn, floorURL, err := listen()
	if err != nil {
		return nil, err
	}
	f.floorURL = floorURL + "/floor"
	floorMux := http.NewServeMux()
	floorMux.Handle("/floor", floorHandler(st))
	floorMux.Handle("/floor_insert", floorInsertHandler(st))
	f.floorInsertURL = floorURL + "/floor_insert"
	// The floor that commits each insert alone has a SQLite file of its own, with the same
	// schema, so its commits neither join nor wait for the server's. On PostgreSQL every
	// insert commits alone already: it is floor_insert.
	alone := st
	if path, ok := strings.CutPrefix(dsn, "sqlite:"); ok {
		if alone, err = sqlstore.Open(ctx, "sqlite:"+path+".floor-alone", sqlstore.WithoutGroupCommit()); err != nil {
			return nil, err
		}
		f.cleanup = append(f.cleanup, func() {
			alone.Close()
			if !o.keep {
				for _, suffix := range []string{"", "-wal", "-shm"} {
					os.Remove(path + ".floor-alone" + suffix)
				}
			}
		})
	}
	floorMux.Handle("/floor_insert_alone", floorInsertHandler(alone))
	f.floorInsertAloneURL = floorURL + "/floor_insert_alone"
	f.floor = &http.Server{Handler: floorMux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = f.floor.Serve(floorLn) }() // returns http.ErrServerClosed after Close
	f.cleanup = append(f.cleanup, func() { f.floor.Close() })
	ok = true
	return f, nil
}

func benchProject(issuer string, gh *config.Connector) *config.Project {
	cc, ac, rt, te := "client_credentials", "authorization_code", "refresh_token", exchange.GrantType
	return &config.Project{
		Key: projectKey, Namespace: projectNS, Name: projectName, DisplayName: "Bench", Issuer: issuer,
		Lifetimes:    config.DefaultLifetimes(),
		Registration: config.Registration{Mode: config.RegistrationClosed},
		Clients: map[string]*config.Client{
			svcID: {ID: svcID, SecretHash: secret.Hash(svcSecret), Name: "Service", GrantTypes: []string{cc},
				Scopes: []string{"read", "write"}, TokenEndpointAuthMethod: "client_secret_basic"},
			webID: {ID: webID, SecretHash: secret.Hash(webSecret), Name: "Web App", RedirectURIs: []string{webRedirect},
				GrantTypes: []string{ac, rt}, Scopes: []string{"openid", "read", "write"}, TokenEndpointAuthMethod: "client_secret_basic"},
			agentID: {ID: agentID, SecretHash: secret.Hash(agentSecret), Name: "Repo Helper",
				RedirectURIs: []string{"http://127.0.0.1/cb"}, GrantTypes: []string{ac, rt, te},
				TokenEndpointAuthMethod: "client_secret_basic", Connectors: []string{gh.Key}},
		},
		Connectors:           map[string]*config.Connector{gh.Key: gh},
		ConnectorsByAudience: map[string]*config.Connector{gh.Audience: gh},
		Redirects:            config.DefaultRedirectRules(),
	}
}

// floorHandler is the floor: what any token endpoint must do at the least — parse the form
// (oauth.ReadForm, the token endpoint's own parser), read Basic credentials, hash the token,
// one indexed read — and nothing else: no routing, no client check, no headers middleware.
func floorHandler(st store.Store) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		form, err := oauth.ReadForm(w, r)
		if err != nil {
			oauth.WriteError(w, err)
			return
		}
		if _, _, ok := r.BasicAuth(); !ok {
			oauth.WriteError(w, oauth.ErrInvalidClient)
			return
		}
		t, err := st.GetToken(r.Context(), secret.Hash(form.Get("subject_token")))
		if err != nil {
			oauth.WriteError(w, oauth.ErrInvalidGrant)
			return
		}
		oauth.WriteJSON(w, http.StatusOK, map[string]any{"active": true, "sub": t.Subject})
	})
}

// floorInsertHandler is the one-insert floor, the one client_credentials is held against: parse
// the form, read Basic credentials, check the secret (SHA-256, constant-time comparison, as
// Latchkey checks its clients' 256-bit secrets), mint a random token and store it with one
// CreateTokens call, answer the token as JSON. It writes through the same store as the server
// (same table, same indexes, and on SQLite the same group commit), so it is the stricter floor:
// a handler that committed each insert alone would be slower than this one.
func floorInsertHandler(st store.Store) http.Handler {
	want := secret.Hash(svcSecret)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		form, err := oauth.ReadForm(w, r)
		if err != nil {
			oauth.WriteError(w, err)
			return
		}
		id, pass, ok := r.BasicAuth()
		if !ok || id != svcID || subtle.ConstantTimeCompare(secret.Hash(pass), want) != 1 {
			oauth.WriteError(w, oauth.ErrInvalidClient)
			return
		}
		tok := secret.New("lk_at_")
		now := time.Now()
		err = st.CreateTokens(r.Context(), store.Token{
			Hash: secret.Hash(tok), Kind: store.AccessToken, Project: projectKey, ClientID: svcID, Subject: svcID,
			Scopes: []string{form.Get("scope")}, FamilyID: secret.New("")[:22], AuthTime: now, IssuedAt: now, ExpiresAt: now.Add(time.Hour),
		})
		if err != nil {
			oauth.WriteError(w, err)
			return
		}
		oauth.WriteJSON(w, http.StatusOK, map[string]any{"access_token": tok, "token_type": "Bearer", "expires_in": 3600})
	})
}

// ---------------------------------------------------------------------------------------------
// Seeding, through the store, in batches

const batch = 1000

// seed stores people, grants, connected accounts (half the people, with sealed upstream tokens
// and the agent allowed), one access token per person issued to the agent, and o.tokens more
// tokens spread over the clients and people.
func (f *fixture) seed(ctx context.Context) error {
	now := time.Now()
	env := f.srv.Env()
	vault := &upstream.Vault{Store: f.st, Keyring: env.Keyring, Now: time.Now}
	gh := f.project.ConnectorsByAudience[githubAudience]
	var mine []store.Token
	for i := range f.o.people {
		id := fmt.Sprintf("p-%07d", i)
		f.people = append(f.people, id)
		if _, err := f.st.UpsertPerson(ctx, store.Person{
			Project: projectKey, ID: id, Source: "password", SourceSubject: id + "@bench.example",
			Email: id + "@bench.example", Name: "Person " + id, CreatedAt: now,
		}); err != nil {
			return fmt.Errorf("person: %w", err)
		}
		for _, c := range []string{webID, agentID} {
			if err := f.st.UpsertGrant(ctx, store.Grant{Project: projectKey, Subject: id, ClientID: c,
				Scopes: []string{"openid", "read"}, CreatedAt: now, UpdatedAt: now}); err != nil {
				return fmt.Errorf("grant: %w", err)
			}
		}
		tok := secret.New(secret.PrefixAccessToken)
		mine = append(mine, store.Token{
			Hash: secret.Hash(tok), Kind: store.AccessToken, Project: projectKey, ClientID: agentID, Subject: id,
			Scopes: []string{"openid"}, FamilyID: secret.New("")[:22], AuthTime: now, IssuedAt: now, ExpiresAt: now.Add(24 * time.Hour),
		})
		if i%2 == 1 {
			f.unconnected = append(f.unconnected, id)
			f.unconnectedTokens = append(f.unconnectedTokens, personToken{id, tok})
			continue
		}
		c := store.Connection{
			ID: fmt.Sprintf("c-%07d", i), Project: projectKey, Subject: id, Connector: gh.Key,
			AccountID: fmt.Sprint(100000 + i), AccountName: fmt.Sprintf("gh-%d", i),
			Status: store.ConnectionActive, CreatedAt: now, UpdatedAt: now,
		}
		vault.Seal(&c, &oauth2.Token{AccessToken: "gho_" + secret.New("")[:36], TokenType: "bearer"})
		c.Scopes = []string{"repo", "read:user"}
		saved, err := f.st.SaveConnection(ctx, c)
		if err != nil {
			return fmt.Errorf("connection: %w", err)
		}
		if err := f.st.AllowAgent(ctx, store.AgentPermission{Project: projectKey, Subject: id, Connector: gh.Key,
			ClientID: agentID, ConnectionID: saved.ID, CreatedAt: now}); err != nil {
			return fmt.Errorf("permission: %w", err)
		}
		f.connectedTokens = append(f.connectedTokens, personToken{id, tok})
	}
	for len(mine) > 0 {
		n := min(len(mine), batch)
		if err := f.st.CreateTokens(ctx, mine[:n]...); err != nil {
			return fmt.Errorf("tokens: %w", err)
		}
		mine = mine[n:]
	}
	if err := f.seedTokens(ctx, now); err != nil {
		return err
	}
	return f.analyze(ctx)
}

// analyze gives PostgreSQL's planner statistics of the seeded tables, as autovacuum keeps them
// on a database in use. Without them it guesses one row per table and may walk a whole
// Project's connections for a token exchange (0.3 ms instead of 0.1 ms in EXPLAIN ANALYZE).
func (f *fixture) analyze(ctx context.Context) error {
	if !strings.HasPrefix(f.dsn, "postgres") {
		return nil
	}
	db, err := sql.Open("pgx", f.dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, `ANALYZE`)
	return err
}

// seedTokens stores o.tokens tokens: access and refresh pairs in families, over the three
// clients and every person. Plaintexts are kept for a sample spread over the set.
func (f *fixture) seedTokens(ctx context.Context, now time.Time) error {
	const sampleSize = 4096
	every := max(1, f.o.tokens/sampleSize)
	clients := []string{webID, agentID, svcID}
	buf := make([]store.Token, 0, batch)
	started := time.Now()
	for i := 0; i < f.o.tokens; {
		buf = buf[:0]
		for len(buf) < batch && i < f.o.tokens {
			client := clients[i%len(clients)]
			subject := ""
			if client != svcID {
				subject = f.people[(i/2)%len(f.people)]
			}
			family := fmt.Sprintf("f-%09d", i/2)
			kind, life := store.AccessToken, time.Hour
			if i%2 == 1 && client != svcID {
				kind, life = store.RefreshToken, 30*24*time.Hour
			}
			plain := secret.New(secret.PrefixAccessToken)
			if kind == store.AccessToken && i%every == 0 && len(f.sample) < sampleSize {
				f.sample = append(f.sample, plain)
			}
			buf = append(buf, store.Token{
				Hash: secret.Hash(plain), Kind: kind, Project: projectKey, ClientID: client, Subject: subject,
				Scopes: []string{"read"}, FamilyID: family, AuthTime: now, IssuedAt: now, ExpiresAt: now.Add(life),
			})
			i++
		}
		if err := f.st.CreateTokens(ctx, buf...); err != nil {
			return fmt.Errorf("tokens: %w", err)
		}
		if i%(100*batch) == 0 {
			logf(f.o, "seeded %d tokens (%.0f/s)", i, float64(i)/time.Since(started).Seconds())
		}
	}
	return nil
}

// storedTokens counts the live tokens of the project (all clients).
func (f *fixture) storedTokens(ctx context.Context) int64 {
	m, err := f.st.CountLiveTokens(ctx, projectKey, time.Now())
	if err != nil {
		return -1
	}
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}
