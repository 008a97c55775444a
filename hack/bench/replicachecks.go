package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/oauth2"

	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/internal/upstream"
	"latchkey.dev/latchkey/internal/upstream/fakegithub"
	"latchkey.dev/latchkey/webhook/exchange"
	"latchkey.dev/latchkey/webhook/links"
)

// Correctness across the replicas beyond the token tables (replicas.go checks those), each as a
// burst of token exchanges: every request of a burst is started at the same moment, round-robin
// over the replicas, while a client_credentials load keeps the replicas busy (its tokens join
// the count replicas.go checks afterwards).
//
//   - One open connect link per person × agent × service. The agent exchanges the tokens of
//     people who have no GitHub connection, from every replica at once: each person must end
//     with exactly one link in the store, still open, and every refusal, whichever replica gave
//     it, must carry that link (its connect_id, and the code whose hash the row holds).
//   - One upstream refresh per connection. Connections whose sealed GitHub access token has
//     expired are exchanged for from every replica at once: the fake GitHub (a real OAuth server
//     in this process, GitHub App style: expiring tokens, rotating refresh tokens) must see
//     exactly one refresh-token grant per connection, and every exchange must answer the one
//     new token, the one the store now holds sealed.

const (
	// replicaGitHubEnv carries the fake GitHub's address to the replica processes.
	replicaGitHubEnv    = "LATCHKEY_BENCH_REPLICA_GITHUB"
	replicaGitHubSecret = "bench-github-secret"
	// burstPeople is how many people (links) and connections (refresh) each burst covers;
	// burstPerReplica how many exchanges each of them gets from each replica.
	burstPeople     = 8
	burstPerReplica = 8
	// githubDelay holds every answer of the fake GitHub back this long during the refresh burst,
	// so that the exchanges reach every replica while the first refresh is still out, as they
	// would with a service a continent away.
	githubDelay = 100 * time.Millisecond
	// burstRedirect is where the fake GitHub sends the codes the harness asks for; nothing
	// listens there (the harness reads the code off the redirect).
	burstRedirect = "http://127.0.0.1/cb"
)

// check is one line of "Correctness after the load".
type check struct {
	ok   bool
	text string
}

func checkf(ok bool, format string, args ...any) check {
	return check{ok: ok, text: fmt.Sprintf(format, args...)}
}

// replicaGitHub is the fake GitHub the replicas' connector talks to.
type replicaGitHub struct {
	gh  *fakegithub.Server
	url string
	srv *http.Server
}

func startReplicaGitHub() (*replicaGitHub, error) {
	accounts := make([]fakegithub.Account, burstPeople)
	for i := range accounts {
		accounts[i] = fakegithub.Account{ID: int64(300000 + i), Login: fmt.Sprintf("gh-refresh-%d", i), Name: "Bench", Password: "bench"}
	}
	gh := fakegithub.New(fakegithub.Options{
		ClientID: githubClientID, ClientSecret: replicaGitHubSecret, Accounts: accounts,
		// GitHub App style: access tokens expire and come with a refresh token that works once.
		AccessTokenTTL: 8 * time.Hour,
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: gh, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }() // returns http.ErrServerClosed after Close
	return &replicaGitHub{gh: gh, url: "http://" + ln.Addr().String(), srv: srv}, nil
}

func (g *replicaGitHub) close() { g.srv.Close() }

// pair has login authorize the app at the fake GitHub (approved beforehand, so no page is
// shown) and redeems the code: the access and refresh token a real connection would hold.
func (g *replicaGitHub) pair(ctx context.Context, login string) (access, refresh string, err error) {
	g.gh.Approve(login, githubClientID)
	q := url.Values{"client_id": {githubClientID}, "redirect_uri": {burstRedirect}, "scope": {"repo read:user"}, "state": {"bench"}}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.url+fakegithub.AuthorizePath+"?"+q.Encode(), nil)
	req.AddCookie(g.gh.SessionCookie(login))
	noFollow := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.Do(req)
	if err != nil {
		return "", "", err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || loc.Query().Get("code") == "" {
		return "", "", fmt.Errorf("fake GitHub authorization: status %d, no code in %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	form := url.Values{"grant_type": {"authorization_code"}, "code": {loc.Query().Get("code")}, "redirect_uri": {burstRedirect}}.Encode()
	tr := post(ctx, g.url+fakegithub.TokenPath, form, githubClientID, replicaGitHubSecret)
	tr.Header.Set("Accept", "application/json")
	body, err := send(noFollow, tr, http.StatusOK)
	if err != nil {
		return "", "", err
	}
	var tok struct {
		AccessToken  string `json:"access_token"`
		RefreshToken string `json:"refresh_token"`
	}
	if err := json.Unmarshal(body, &tok); err != nil || tok.AccessToken == "" || tok.RefreshToken == "" {
		return "", "", fmt.Errorf("fake GitHub token endpoint: %s", body)
	}
	return tok.AccessToken, tok.RefreshToken, nil
}

// works reports whether GitHub accepts tok (GET /user).
func (g *replicaGitHub) works(ctx context.Context, tok string) bool {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.url+fakegithub.UserPath, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	_, err := send(http.DefaultClient, req, http.StatusOK)
	return err == nil
}

// exchangeAnswer is one token-exchange answer, success or refusal.
type exchangeAnswer struct {
	replica      int
	status       int
	err          error
	AccessToken  string `json:"access_token"`
	RefreshToken string `json:"refresh_token"`
	Error        string `json:"error"`
	Reason       string `json:"reason"`
	ConnectURI   string `json:"connect_uri"`
	ConnectID    string `json:"connect_id"`
}

// exchangeBodies are the token-exchange requests for each person's token.
func exchangeBodies(people []personToken) []string {
	out := make([]string, len(people))
	for i, p := range people {
		out[i] = exchangeForm(p.token)
	}
	return out
}

// burst sends burstPerReplica copies of each token request body to every replica as client
// user, all started at once (each request waits until all are ready), and returns the answers
// by body.
func burst(ctx context.Context, issuers, bodies []string, user, pass string) [][]exchangeAnswer {
	per := burstPerReplica * len(issuers)
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: len(bodies) * per}, Timeout: 30 * time.Second}
	defer c.CloseIdleConnections()
	out := make([][]exchangeAnswer, len(bodies))
	start := make(chan struct{})
	var ready, done sync.WaitGroup
	for i, body := range bodies {
		out[i] = make([]exchangeAnswer, per)
		for j := range per {
			ready.Add(1)
			done.Go(func() {
				a := &out[i][j]
				a.replica = (i + j) % len(issuers)
				req := post(ctx, issuers[a.replica]+"/token", body, user, pass)
				ready.Done()
				<-start
				resp, err := c.Do(req)
				if err != nil {
					a.err = err
					return
				}
				defer resp.Body.Close()
				a.status = resp.StatusCode
				if err := json.NewDecoder(resp.Body).Decode(a); err != nil {
					a.err = fmt.Errorf("status %d, body not JSON: %w", resp.StatusCode, err)
				}
			})
		}
	}
	ready.Wait()
	close(start)
	done.Wait()
	return out
}

// busy keeps the replicas answering client_credentials, round-robin, until the returned stop is
// called. Its answers and errors are counted as the measured runs' are.
func (l *replicaLoad) busy(ctx context.Context, issuers []string, workers int) (stop func()) {
	quit := make(chan struct{})
	var wg sync.WaitGroup
	var next atomic.Uint64
	for w := range workers {
		wg.Go(func() {
			for {
				select {
				case <-quit:
					return
				default:
				}
				if ctx.Err() != nil {
					return
				}
				if err := l.one(ctx, issuers[(next.Add(1)-1)%uint64(len(issuers))], "client_credentials", w); err != nil {
					l.noteErr(err)
				}
			}
		})
	}
	return func() {
		close(quit)
		wg.Wait()
	}
}

// checkLinks is the connect-link burst; people have no GitHub connection.
func checkLinks(ctx context.Context, db *sql.DB, issuers []string, people []personToken) ([]check, error) {
	answers := burst(ctx, issuers, exchangeBodies(people), agentID, agentSecret)
	total, refused, differ, stored, open, matches := 0, 0, 0, 0, 0, 0
	var problem string
	note := func(format string, args ...any) {
		if problem == "" {
			problem = "; first problem: " + fmt.Sprintf(format, args...)
		}
	}
	for i, p := range people {
		var id, code string
		differed := differ
		for _, a := range answers[i] {
			total++
			if a.err != nil || a.status != http.StatusBadRequest || a.Error != "invalid_grant" || a.Reason != exchange.ReasonConnectRequired {
				note("%s: status %d, error %q, reason %q, %v", p.person, a.status, a.Error, a.Reason, a.err)
				continue
			}
			refused++
			// Each replica names its own address in the link (they are three listeners here,
			// behind one address in production); the code after it is the link.
			c, ok := strings.CutPrefix(a.ConnectURI, issuers[a.replica]+links.PathPrefix)
			switch {
			case !ok || c == "" || a.ConnectID == "":
				differ++
				note("%s: connect_uri %q, connect_id %q", p.person, a.ConnectURI, a.ConnectID)
			case id == "":
				id, code = a.ConnectID, c
			case a.ConnectID != id || c != code:
				differ++
				note("%s: two links handed out (%s and %s)", p.person, id, a.ConnectID)
			}
		}
		mine, mineOpen, openID, openHash, err := storedLinks(ctx, db, p.person)
		if err != nil {
			return nil, err
		}
		same := id != "" && openID == id && bytes.Equal(openHash, secret.Hash(code))
		if mine != 1 || mineOpen != 1 {
			note("%s: %d links stored, %d open", p.person, mine, mineOpen)
		}
		if mine == 1 && same && differ == differed {
			matches++
		}
		stored += mine
		open += mineOpen
	}
	n := len(people)
	return []check{
		checkf(refused == total, "connect links: %d of %d token exchanges for %d people without a GitHub connection, sent from %d replicas at once, refused with connect_required%s",
			refused, total, n, len(issuers), problemIf(refused != total, problem)),
		checkf(stored == n && open == n && matches == n && differ == 0,
			"connect links: %d links stored for %d person × agent × service, %d open (want one each); every refusal for a person carried its one link (connect_id and the code of the stored hash) for %d of %d people, %d refusals differed%s",
			stored, n, open, matches, n, differ, problemIf(stored != n || open != n || matches != n || differ != 0, problem)),
	}, nil
}

// storedLinks reads the agent's GitHub links of person: how many, how many open, and the id
// and code hash of the (last) open one.
func storedLinks(ctx context.Context, db *sql.DB, person string) (total, open int, openID string, openHash []byte, err error) {
	rows, err := db.QueryContext(ctx, `SELECT id, code_hash, state FROM links WHERE project = $1 AND subject = $2 AND client_id = $3 AND connector = $4`,
		projectKey, person, agentID, "default/github")
	if err != nil {
		return 0, 0, "", nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var id, state string
		var hash []byte
		if err := rows.Scan(&id, &hash, &state); err != nil {
			return 0, 0, "", nil, err
		}
		total++
		if state == string(store.LinkOpen) {
			open++
			openID, openHash = id, hash
		}
	}
	return total, open, openID, openHash, rows.Err()
}

func problemIf(failed bool, problem string) string {
	if failed {
		return problem
	}
	return ""
}

// seedExpired gives each person a GitHub connection the agent may use whose sealed access token
// expired a minute ago, with a refresh token the fake GitHub issued; it returns the connection
// ids and the expired access tokens.
func seedExpired(ctx context.Context, st store.Store, vault *upstream.Vault, g *replicaGitHub, people []personToken) (ids, old []string, err error) {
	now := time.Now()
	for i, p := range people {
		login := fmt.Sprintf("gh-refresh-%d", i)
		at, rt, err := g.pair(ctx, login)
		if err != nil {
			return nil, nil, err
		}
		c := store.Connection{
			Project: projectKey, Subject: p.person, Connector: "default/github",
			AccountID: fmt.Sprint(300000 + i), AccountName: login, Status: store.ConnectionActive, CreatedAt: now, UpdatedAt: now,
		}
		c.ID = "c-refresh-" + p.person
		vault.Seal(&c, &oauth2.Token{AccessToken: at, RefreshToken: rt, TokenType: "bearer", Expiry: now.Add(-time.Minute)})
		c.Scopes = []string{"repo", "read:user"}
		saved, err := st.SaveConnection(ctx, c)
		if err != nil {
			return nil, nil, fmt.Errorf("connection: %w", err)
		}
		if err := st.AllowAgent(ctx, store.AgentPermission{Project: projectKey, Subject: p.person, Connector: c.Connector,
			ClientID: agentID, ConnectionID: saved.ID, CreatedAt: now}); err != nil {
			return nil, nil, fmt.Errorf("permission: %w", err)
		}
		ids = append(ids, saved.ID)
		old = append(old, at)
	}
	return ids, old, nil
}

// checkRefresh is the upstream-refresh burst; people's connections were seeded by seedExpired.
func checkRefresh(ctx context.Context, vault *upstream.Vault, g *replicaGitHub, issuers []string, people []personToken, ids, old []string) ([]check, error) {
	g.gh.SetDelay(githubDelay)
	before := g.gh.RefreshCalls()
	answers := burst(ctx, issuers, exchangeBodies(people), agentID, agentSecret)
	refreshes := g.gh.RefreshCalls() - before
	g.gh.SetDelay(0)

	connector := g.gh.Connector(g.url, burstRedirect)
	total, answered, same := 0, 0, 0
	var problem string
	note := func(format string, args ...any) {
		if problem == "" {
			problem = "; first problem: " + fmt.Sprintf(format, args...)
		}
	}
	for i, p := range people {
		var tok string
		agree := true
		for _, a := range answers[i] {
			total++
			if a.err != nil || a.status != http.StatusOK || a.AccessToken == "" {
				note("%s: status %d, error %q, %v", p.person, a.status, a.Error, a.err)
				agree = false
				continue
			}
			answered++
			switch {
			case tok == "":
				tok = a.AccessToken
			case a.AccessToken != tok:
				agree = false
				note("%s: two different GitHub tokens answered", p.person)
			}
		}
		if !agree || tok == "" {
			continue
		}
		if tok == old[i] {
			note("%s: the expired token was answered", p.person)
			continue
		}
		// The store holds what was answered (a second refresh would have overwritten it), and
		// GitHub still takes it (a later refresh would have retired it).
		stored, err := vault.Token(ctx, connector, projectKey, ids[i])
		if err != nil {
			return nil, fmt.Errorf("opening connection %s: %w", ids[i], err)
		}
		if stored.AccessToken != tok {
			note("%s: the store holds another token than the one answered", p.person)
			continue
		}
		if !g.works(ctx, tok) {
			note("%s: GitHub no longer accepts the answered token", p.person)
			continue
		}
		same++
	}
	n := len(people)
	return []check{
		checkf(answered == total, "upstream refresh: %d of %d token exchanges for %d connections whose GitHub token had expired, sent from %d replicas at once, answered with a GitHub token%s",
			answered, total, n, len(issuers), problemIf(answered != total, problem)),
		checkf(refreshes == int64(n), "upstream refresh: the fake GitHub saw %d refresh-token grants for %d connections (want one each)", refreshes, n),
		checkf(same == n, "upstream refresh: every exchange for a connection answered the same new GitHub token, the one stored sealed and live at GitHub, for %d of %d connections%s",
			same, n, problemIf(same != n, problem)),
	}, nil
}

// liveTokens counts the live tokens client holds for person.
func liveTokens(ctx context.Context, db *sql.DB, client, person string) (int64, error) {
	var n int64
	err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM tokens WHERE project = $1 AND client_id = $2 AND subject = $3
		AND revoked_at IS NULL AND rotated_at IS NULL AND expires_at > $4`, projectKey, client, person, time.Now().UnixNano()).Scan(&n)
	return n, err
}

// checkReuse presents one refresh token of the web app from every replica at once (one
// rotation; the others, inside the grace window, get the very same answer), rotates once more,
// then presents the first token again from every replica at once: an older generation is
// reuse, refused everywhere, and every live token the client holds for the person is ended.
// It returns how many live tokens of the client that ended besides the ones it made, for the
// count of the web app's live tokens.
func checkReuse(ctx context.Context, st store.Store, db *sql.DB, issuers []string, person string) ([]check, int64, error) {
	others, err := liveTokens(ctx, db, webID, person)
	if err != nil {
		return nil, 0, err
	}
	now := time.Now()
	r0 := secret.New(secret.PrefixRefreshToken)
	if err := st.CreateTokens(ctx, store.Token{
		Hash: secret.Hash(r0), Kind: store.RefreshToken, Project: projectKey, ClientID: webID, Subject: person,
		Scopes: []string{"read"}, FamilyID: secret.New("")[:22], AuthTime: now, IssuedAt: now, ExpiresAt: now.Add(24 * time.Hour),
	}); err != nil {
		return nil, 0, err
	}
	body := func(rt string) string { return "grant_type=refresh_token&refresh_token=" + url.QueryEscape(rt) }
	// live: usable and not rotated away (store.Token.Active leaves rotation out).
	live := func(tok string) bool {
		t, err := st.GetToken(ctx, secret.Hash(tok))
		return err == nil && t.Active(time.Now()) && t.RotatedAt == nil
	}
	var problem string
	note := func(format string, args ...any) {
		if problem == "" {
			problem = "; first problem: " + fmt.Sprintf(format, args...)
		}
	}

	first := burst(ctx, issuers, []string{body(r0)}, webID, webSecret)[0]
	answered, same, r1, at1, bad := onePair(first)
	if bad != "" {
		note("%s", bad)
	}
	rotatedOnce := answered == len(first) && same == len(first) && r1 != r0 && !live(r0) && live(r1) && live(at1)
	if !rotatedOnce {
		note("%d answered, %d with the first pair; presented token live: %v, new refresh token live: %v", answered, same, live(r0), live(r1))
	}
	checks := []check{checkf(rotatedOnce,
		"refresh reuse: one refresh token presented %d times at once from %d replicas: %d answered, %d with the same new pair, which is live (one rotation, the others replayed it inside the grace window)%s",
		len(first), len(issuers), answered, same, problemIf(!rotatedOnce, problem))}
	if !rotatedOnce {
		return append(checks, checkf(false, "refresh reuse: the older generation was not tried, the first burst did not end in one live pair")), others, nil
	}

	// One more rotation, so that the first token is now two generations behind the live one.
	b, err := send(http.DefaultClient, post(ctx, issuers[0]+"/token", body(r1), webID, webSecret), http.StatusOK)
	if err != nil {
		return nil, 0, fmt.Errorf("rotating once more: %w", err)
	}
	var second struct {
		AccessToken  string `json:"access_token"`
		RefreshToken string `json:"refresh_token"`
	}
	if err := json.Unmarshal(b, &second); err != nil {
		return nil, 0, err
	}
	again := burst(ctx, issuers, []string{body(r0)}, webID, webSecret)[0]
	refused := 0
	for _, a := range again {
		if a.err == nil && a.status == http.StatusBadRequest && a.Error == "invalid_grant" {
			refused++
		} else {
			note("reuse answered status %d, error %q, %v", a.status, a.Error, a.err)
		}
	}
	stillLive := 0
	for _, t := range []string{r1, at1, second.RefreshToken, second.AccessToken} {
		if live(t) {
			stillLive++
		}
	}
	left, err := liveTokens(ctx, db, webID, person)
	if err != nil {
		return nil, 0, err
	}
	ended := refused == len(again) && stillLive == 0 && left == 0
	checks = append(checks, checkf(ended,
		"refresh reuse: after one more rotation the first token presented again %d times at once from %d replicas: %d refused; live tokens of the client for the person afterwards: %d (want 0; %d were live besides this family)%s",
		len(again), len(issuers), refused, left, others, problemIf(!ended, problem)))
	return checks, others, nil
}

// onePair tallies refresh answers: how many gave a pair, how many the same pair as the first
// that did, that pair, and what the first failed answer was.
func onePair(answers []exchangeAnswer) (answered, same int, refresh, access, bad string) {
	for _, a := range answers {
		if a.err != nil || a.status != http.StatusOK || a.RefreshToken == "" {
			if bad == "" {
				bad = fmt.Sprintf("status %d, error %q, %v", a.status, a.Error, a.err)
			}
			continue
		}
		answered++
		if refresh == "" {
			refresh, access = a.RefreshToken, a.AccessToken
		}
		if a.RefreshToken == refresh && a.AccessToken == access {
			same++
		}
	}
	return answered, same, refresh, access, bad
}

// burstChecks seeds the connections, then runs both bursts under a client_credentials load.
// It returns the checks, and how many of the web app's live tokens, made before the load, the
// reuse check ended.
func (l *replicaLoad) burstChecks(ctx context.Context, f *fixture, db *sql.DB, vault *upstream.Vault, g *replicaGitHub, issuers []string) ([]check, int64, error) {
	if len(f.unconnectedTokens) < 2*burstPeople || len(f.people) <= l.o.concurrency {
		return nil, 0, fmt.Errorf("the checks need %d people without a connection and more people than clients; -people %d is too few", 2*burstPeople, l.o.people)
	}
	refreshPeople, linkPeople := f.unconnectedTokens[:burstPeople], f.unconnectedTokens[burstPeople:2*burstPeople]
	ids, old, err := seedExpired(ctx, f.st, vault, g, refreshPeople)
	if err != nil {
		return nil, 0, err
	}
	stop := l.busy(ctx, issuers, 4)
	defer stop()
	logf(l.o, "checks: %d connect-link exchanges at once", burstPeople*burstPerReplica*len(issuers))
	lc, err := checkLinks(ctx, db, issuers, linkPeople)
	if err != nil {
		return nil, 0, err
	}
	logf(l.o, "checks: %d exchanges of expired connections at once", burstPeople*burstPerReplica*len(issuers))
	rc, err := checkRefresh(ctx, vault, g, issuers, refreshPeople, ids, old)
	if err != nil {
		return nil, 0, err
	}
	// The last person: the refresh chains of the load belong to the first -concurrency people.
	logf(l.o, "checks: one refresh token presented %d times at once, twice", burstPerReplica*len(issuers))
	uc, ended, err := checkReuse(ctx, f.st, db, issuers, f.people[len(f.people)-1])
	if err != nil {
		return nil, 0, err
	}
	return append(append(lc, rc...), uc...), ended, nil
}
