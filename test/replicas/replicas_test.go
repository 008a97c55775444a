// Package replicas shows that the rules that hold on one server hold on several: three server
// instances, each with its own connection pool to one PostgreSQL database (as three pods
// would have), behind a round-robin front. The servers run in this process (webhook.New, as
// cmd/latchkey builds it) rather than as three binaries: what they share is exactly what pods
// share (the database, the sealing keys, the same compiled configuration), and nothing in
// process memory crosses from one to another.
//
// The tests need PostgreSQL (LATCHKEY_TEST_POSTGRES_DSN), and each runs a second time through
// PgBouncer in transaction mode (LATCHKEY_TEST_PGBOUNCER_DSN); they skip without them, except
// under CI=true, where they fail.
package replicas_test

import (
	"context"
	"database/sql"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/test/stack"
	"latchkey.dev/latchkey/webhook/signin"
)

const replicas = 3

// eachPath runs test twice: with every replica connected to PostgreSQL directly, and through
// PgBouncer in transaction mode, where consecutive transactions of one replica's connection
// may run on different server connections (docs/operations.md, "PostgreSQL in production").
func eachPath(t *testing.T, test func(t *testing.T, dsn func(testing.TB) string)) {
	t.Run("direct", func(t *testing.T) { test(t, stack.PostgresDSN) })
	t.Run("pgbouncer", func(t *testing.T) { test(t, stack.PgBouncerDSN) })
}

func newStack(t *testing.T, dsn func(testing.TB) string, o stack.Options) *stack.Stack {
	t.Helper()
	o.DSN = dsn(t)
	o.Replicas = replicas
	return stack.New(t, o)
}

// pinned sends a token request to one replica.
func pinned(t *testing.T, s *stack.Stack, replica int, form url.Values) stack.Answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.Issuer+"/token", strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set(stack.ReplicaHeader, strconv.Itoa(replica))
	req.SetBasicAuth(stack.Agent, stack.AgentSecret)
	a, err := stack.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func refreshForm(rt string) url.Values {
	return url.Values{"grant_type": {"refresh_token"}, "refresh_token": {rt}}
}

// everyReplicaServed checks the front spread the work: a test whose requests all landed on one
// replica would prove nothing about several.
func everyReplicaServed(t *testing.T, s *stack.Stack) {
	t.Helper()
	for i, r := range s.Replicas {
		if r.Served.Load() == 0 {
			t.Errorf("replica %d served no request", i)
		}
	}
}

// Refresh-token reuse detection (docs/recognised-apps.md): a refresh token rotated on one replica
// and presented again on another ends the grant everywhere; a retry inside the grace window gets
// the same answer on any replica.
func TestRefreshReuseDetectionAcrossReplicas(t *testing.T) {
	eachPath(t, testRefreshReuseDetectionAcrossReplicas)
}

func testRefreshReuseDetectionAcrossReplicas(t *testing.T, dsn func(testing.TB) string) {
	s := newStack(t, dsn, stack.Options{})
	b := s.Browser()
	// The sign-in, consent and code redemption themselves go round the replicas: the session
	// and the code are in the database, not in whichever replica issued them.
	first, err := b.CodeFlow(stack.AliceEmail, stack.AlicePassword)
	if err != nil || first.Status != http.StatusOK {
		t.Fatalf("code flow through %d replicas: %v %d %s", replicas, err, first.Status, first.Raw)
	}
	everyReplicaServed(t, s)
	rt0 := first.Str("refresh_token")

	// Rotate on replica 0.
	second := pinned(t, s, 0, refreshForm(rt0))
	if second.Status != http.StatusOK {
		t.Fatalf("refresh on replica 0: %d %s", second.Status, second.Raw)
	}
	rt1, at1 := second.Str("refresh_token"), second.Str("access_token")

	// A retry of the same refresh on replica 1, inside the grace window: the same answer.
	retry := pinned(t, s, 1, refreshForm(rt0))
	if retry.Status != http.StatusOK || retry.Str("refresh_token") != rt1 || retry.Str("access_token") != at1 {
		t.Fatalf("retry inside the grace window on replica 1: %d %s; want replica 0's answer again", retry.Status, retry.Raw)
	}

	// Many concurrent retries of the next rotation, spread over every replica: one rotation,
	// one answer.
	var wg sync.WaitGroup
	answers := make([]stack.Answer, 30)
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = pinned(t, s, i%replicas, refreshForm(rt1))
		}()
	}
	wg.Wait()
	rt2 := answers[0].Str("refresh_token")
	for i, a := range answers {
		if a.Status != http.StatusOK || a.Str("refresh_token") != rt2 || rt2 == "" || rt2 == rt1 {
			t.Fatalf("concurrent refresh %d (replica %d): %d %s; want every one to get the same new pair", i, i%replicas, a.Status, a.Raw)
		}
	}
	at2 := answers[0].Str("access_token")

	// After the grace window, the old token on replica 2 is reuse: the grant ends, the copy's
	// successor included, whichever replica is asked next.
	s.Clock.Advance(s.Project.Lifetimes.RefreshGrace + time.Second)
	reuse := pinned(t, s, 2, refreshForm(rt1))
	if reuse.Status != http.StatusBadRequest || reuse.Str("error") != "invalid_grant" {
		t.Fatalf("reuse on replica 2: %d %s; want invalid_grant", reuse.Status, reuse.Raw)
	}
	for i := range replicas {
		if a := pinned(t, s, i, refreshForm(rt2)); a.Status != http.StatusBadRequest || a.Str("error") != "invalid_grant" {
			t.Errorf("the live successor on replica %d after reuse: %d %s; want it ended", i, a.Status, a.Raw)
		}
	}
	for _, at := range []string{at1, at2} {
		tok, err := s.Admin.GetToken(context.Background(), secret.Hash(at))
		if err != nil || tok.Active(s.Clock.Now()) {
			t.Errorf("access token still active after reuse detection (err %v)", err)
		}
	}
}

// One open connect link per person, agent and service, however many replicas are asked at once.
func TestOneOpenLinkAcrossReplicas(t *testing.T) { eachPath(t, testOneOpenLinkAcrossReplicas) }

func testOneOpenLinkAcrossReplicas(t *testing.T, dsn func(testing.TB) string) {
	s := newStack(t, dsn, stack.Options{})
	subject := s.AccessToken(stack.AliceEmail, stack.Agent)

	const n = 30
	var wg sync.WaitGroup
	answers := make([]stack.Answer, n)
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			answers[i], errs[i] = s.Exchange(context.Background(), subject)
		}()
	}
	close(start)
	wg.Wait()
	everyReplicaServed(t, s)

	uri, id := answers[0].Str("connect_uri"), answers[0].Str("connect_id")
	for i, a := range answers {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if a.Status != http.StatusBadRequest || a.Str("reason") != "connect_required" {
			t.Fatalf("exchange %d: %d %s; want the connect_required refusal", i, a.Status, a.Raw)
		}
		if a.Str("connect_uri") != uri || a.Str("connect_id") != id || uri == "" {
			t.Fatalf("exchange %d got link %s (%s), another got %s (%s): two links are open", i, a.Str("connect_id"), a.Str("connect_uri"), id, uri)
		}
	}
	db := rawDB(t, s)
	var open int
	if err := db.QueryRow(`SELECT count(*) FROM links WHERE state = 'open'`).Scan(&open); err != nil {
		t.Fatal(err)
	}
	if open != 1 {
		t.Errorf("%d open links stored, want 1", open)
	}
}

// The vault's upstream refresh: fifty agents asking at once, on three replicas, for a connection
// whose GitHub token has expired cause one refresh at GitHub. GitHub rotates refresh tokens, so a
// second refresh would have used a retired one and broken the connection.
func TestSingleUpstreamRefreshAcrossReplicas(t *testing.T) {
	eachPath(t, testSingleUpstreamRefreshAcrossReplicas)
}

func testSingleUpstreamRefreshAcrossReplicas(t *testing.T, dsn func(testing.TB) string) {
	s := newStack(t, dsn, stack.Options{AccessTokenTTL: time.Hour})
	conn := s.ConnectGitHub(stack.AliceEmail, stack.AliceLogin)
	subject := s.AccessToken(stack.AliceEmail, stack.Agent)
	s.Clock.Advance(2 * time.Hour) // the GitHub access token has expired

	const n = 50
	var wg sync.WaitGroup
	answers := make([]stack.Answer, n)
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			answers[i], errs[i] = s.Exchange(context.Background(), subject)
		}()
	}
	close(start)
	wg.Wait()
	everyReplicaServed(t, s)

	if got := s.GitHub.RefreshCalls(); got != 1 {
		t.Errorf("GitHub saw %d refreshes for %d concurrent exchanges on %d replicas, want 1", got, n, replicas)
	}
	tok := answers[0].Str("access_token")
	for i, a := range answers {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if a.Status != http.StatusOK || a.Str("access_token") != tok || tok == "" {
			t.Fatalf("exchange %d: %d %s; want every agent to get the one refreshed token", i, a.Status, a.Raw)
		}
	}
	c, err := s.Admin.GetConnection(context.Background(), stack.ProjectKey, conn.ID)
	if err != nil || c.Status != store.ConnectionActive {
		t.Fatalf("connection after the refresh: %+v %v", c.Status, err)
	}
	// The rotated refresh token was kept: the next expiry refreshes once more, successfully.
	s.Clock.Advance(2 * time.Hour)
	if a, err := s.Exchange(context.Background(), subject); err != nil || a.Status != http.StatusOK || a.Str("access_token") == tok {
		t.Fatalf("exchange after the next expiry: %v %d %s", err, a.Status, a.Raw)
	}
	if got := s.GitHub.RefreshCalls(); got != 2 {
		t.Errorf("GitHub saw %d refreshes in all, want 2", got)
	}
}

// Expired rows are collected by one replica at a time: replicas collecting at once delete each
// row once between them.
func TestGarbageCollectionAcrossReplicas(t *testing.T) {
	eachPath(t, testGarbageCollectionAcrossReplicas)
}

func testGarbageCollectionAcrossReplicas(t *testing.T, dsn func(testing.TB) string) {
	s := newStack(t, dsn, stack.Options{})
	for range 20 {
		s.AccessToken(stack.AliceEmail, stack.Agent) // a day long
	}
	s.Clock.Advance(48 * time.Hour)
	var wg sync.WaitGroup
	results := make([]store.GCResult, replicas)
	errs := make([]error, replicas)
	for i, r := range s.Replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = r.Store.GarbageCollect(context.Background(), s.Clock.Now())
		}()
	}
	wg.Wait()
	var tokens int64
	for i := range results {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		tokens += results[i]["tokens"]
	}
	if tokens != 20 {
		t.Errorf("replicas reported %d tokens collected between them, want 20 (%v)", tokens, results)
	}
}

func rawDB(t *testing.T, s *stack.Stack) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", s.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// Sign-in rate limits hold across replicas (docs/security.md): someone guessing alice's
// password gets signin.AccountBurst attempts from an address, however the front spreads them
// over the replicas — not that many per replica.
func TestSignInLimitAcrossReplicas(t *testing.T) { eachPath(t, testSignInLimitAcrossReplicas) }

func testSignInLimitAcrossReplicas(t *testing.T, dsn func(testing.TB) string) {
	s := newStack(t, dsn, stack.Options{})
	b := s.Browser()
	form, err := b.Get(b.Issuer + "/sign-in?prompt=login")
	if err != nil || form.Status != http.StatusOK {
		t.Fatalf("sign-in page: %v %d", err, form.Status)
	}
	f := form.Hidden()
	f.Set("username", stack.AliceEmail)
	for i := range replicas * signin.AccountBurst {
		f.Set("password", "guess "+strconv.Itoa(i))
		p, err := b.Post(b.Issuer+"/sign-in", f)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case i < signin.AccountBurst && p.Status != http.StatusOK:
			t.Fatalf("guess %d: %d, want the form again (200)", i+1, p.Status)
		case i >= signin.AccountBurst && p.Status != http.StatusTooManyRequests:
			t.Fatalf("guess %d of alice's password, spread over %d replicas: %d, want 429 after %d guesses in all",
				i+1, replicas, p.Status, signin.AccountBurst)
		}
	}
	everyReplicaServed(t, s)
	// The right password is refused too while the bucket is empty, on every replica; the
	// limit slows the guesser down, and alice waits with them.
	f.Set("password", stack.AlicePassword)
	for range replicas {
		if p, err := b.Post(b.Issuer+"/sign-in", f); err != nil || p.Status != http.StatusTooManyRequests {
			t.Fatalf("alice's own password while the bucket is empty: %v %d, want 429", err, p.Status)
		}
	}
	s.Clock.Advance(signin.AccountEvery)
	if err := b.SignIn(stack.AliceEmail, stack.AlicePassword); err != nil {
		t.Fatalf("after one refill, alice's password: %v", err)
	}
}
