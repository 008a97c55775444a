package upstream_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/netguard"
	"latchkey.dev/latchkey/internal/store"
	sqlstore "latchkey.dev/latchkey/internal/store/sql"
	"latchkey.dev/latchkey/internal/testclock"
	"latchkey.dev/latchkey/internal/upstream"
	"latchkey.dev/latchkey/internal/upstream/fakeoauth"
)

// service is one fake provider as the refresher tests drive it.
type service struct {
	name string
	c    *config.Connector
	clk  *testclock.Clock
	// connect runs the connection flow for alice and returns her tokens.
	connect func(t *testing.T) (upstream.Account, *oauth2.Token)
	// refuse makes the service refuse alice's refresh token from now on; code is the error
	// code it answers with.
	refuse func()
	code   string
	// down makes refreshes fail as an outage does (5xx), or ends the outage.
	down      func(bool)
	refreshes func() int
}

// services are the fakes the refresher tests run against: GitHub (bad_refresh_token, 503 in
// text), Linear (RFC 6749's invalid_grant) and Slack (invalid_refresh_token in a 200).
func services(t *testing.T) []*service {
	g := newGitHub(t, time.Hour)
	gh := &service{name: "github", c: g.c, clk: g.clk, code: "bad_refresh_token",
		refuse: func() { g.fake.RevokeAll("alice") }, down: g.fake.SetRefreshUnavailable,
		refreshes: func() int { return int(g.fake.RefreshCalls()) }}
	gh.connect = func(t *testing.T) (upstream.Account, *oauth2.Token) {
		v := upstream.NewVerifier()
		acct, tok, err := upstream.Exchange(t.Context(), nil, g.c, g.authorize(t, "alice", "s", v).Get("code"), v)
		if err != nil {
			t.Fatal(err)
		}
		return acct, tok
	}
	out := []*service{gh}
	for _, shape := range []fakeoauth.Shape{fakeoauth.Linear, fakeoauth.Slack} {
		f := newFakeService(t, shape, time.Hour)
		s := &service{name: string(shape), c: f.c, clk: testclock.New(g.clk.Now()), code: "invalid_grant",
			refuse: func() { f.fake.RevokeAll(dialectAlice.Login) }, down: f.fake.SetRefreshUnavailable,
			refreshes: func() int {
				n := 0
				for _, r := range f.requestsTo(fakeoauth.PathsOf(shape).Token) {
					if r.Params.Get("grant_type") == "refresh_token" {
						n++
					}
				}
				return n
			}}
		if shape == fakeoauth.Slack {
			s.code = "invalid_refresh_token"
		}
		s.connect = func(t *testing.T) (upstream.Account, *oauth2.Token) {
			v := upstream.NewVerifier()
			acct, tok, err := upstream.Exchange(t.Context(), nil, f.c, f.connect(t, v), v)
			if err != nil {
				t.Fatal(err)
			}
			return acct, tok
		}
		out = append(out, s)
	}
	return out
}

// refreshEnv is one serve process: a vault that remembers uses and records changes, and its
// refresher.
type refreshEnv struct {
	svc *service
	st  store.Store
	v   *upstream.Vault
	r   *upstream.Refresher

	mu      sync.Mutex
	records []store.AuditRecord
}

func newRefreshEnv(t *testing.T, svc *service, st store.Store) *refreshEnv {
	e := &refreshEnv{svc: svc, st: st}
	e.v = &upstream.Vault{Store: st, Keyring: keyring(t, "a", "a"), Now: svc.clk.Now, TrackUses: true,
		Record: func(_ context.Context, r store.AuditRecord) {
			e.mu.Lock()
			e.records = append(e.records, r)
			e.mu.Unlock()
		}}
	h := &config.Holder{}
	h.Store(&config.Snapshot{Projects: map[string]*config.Project{
		project: {Key: project, Connectors: map[string]*config.Connector{svc.c.Key: svc.c}},
	}})
	e.r = &upstream.Refresher{Vault: e.v, Store: st, Config: h, Window: 10 * time.Minute, UsedWithin: 24 * time.Hour}
	return e
}

// save stores alice's connection with tok.
func (e *refreshEnv) save(t *testing.T, acct upstream.Account, tok *oauth2.Token) store.Connection {
	t.Helper()
	now := e.svc.clk.Now()
	conn := store.Connection{ID: "conn-alice", Project: project, Subject: "person-alice", Connector: e.svc.c.Key,
		AccountID: acct.ID, AccountName: acct.Name, CreatedAt: now, UpdatedAt: now}
	e.v.Seal(&conn, tok)
	saved, err := e.st.SaveConnection(t.Context(), conn)
	if err != nil {
		t.Fatal(err)
	}
	return saved
}

// use plays an agent's exchange: the vault hands the token out (and remembers the use).
func (e *refreshEnv) use(t *testing.T, id string) (*oauth2.Token, error) {
	t.Helper()
	conn, err := e.st.GetConnection(t.Context(), project, id)
	if err != nil {
		t.Fatal(err)
	}
	return e.v.TokenFor(t.Context(), e.svc.c, conn)
}

func (e *refreshEnv) pass(t *testing.T) upstream.Pass {
	t.Helper()
	p, err := e.r.RunOnce(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (e *refreshEnv) state(t *testing.T, id string) store.Connection {
	t.Helper()
	c, err := e.st.GetConnection(t.Context(), project, id)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (e *refreshEnv) takeRecords() []store.AuditRecord {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := e.records
	e.records = nil
	return out
}

// A connection in use is renewed before it expires, once; one nobody used is not, and neither
// is one whose token has long to live.
func TestRefresherRenewsConnectionsInUse(t *testing.T) {
	for _, svc := range services(t) {
		t.Run(svc.name, func(t *testing.T) {
			e := newRefreshEnv(t, svc, openSQLite(t))
			acct, tok := svc.connect(t)
			conn := e.save(t, acct, tok)
			first, err := e.use(t, conn.ID)
			if err != nil {
				t.Fatal(err)
			}
			before := svc.refreshes()

			svc.clk.Advance(30 * time.Minute) // 30 minutes left: outside the window
			e.pass(t)
			if svc.refreshes() != before {
				t.Fatal("a token with 30 minutes left was refreshed")
			}
			svc.clk.Advance(25 * time.Minute) // 5 minutes left
			if p := e.pass(t); p.Refreshed != 1 || p.Failed != 0 {
				t.Fatalf("pass %+v", p)
			}
			if svc.refreshes() != before+1 {
				t.Fatalf("refreshes %d, want %d", svc.refreshes(), before+1)
			}
			row := e.state(t, conn.ID)
			if row.Status != store.ConnectionActive || !row.Expiry.Equal(svc.clk.Now().Add(time.Hour)) {
				t.Fatalf("after the pass: %q, expiry %v", row.Status, row.Expiry)
			}
			// The agent's next exchange finds the new token without a refresh of its own.
			tok2, err := e.use(t, conn.ID)
			if err != nil || tok2.AccessToken == first.AccessToken || svc.refreshes() != before+1 {
				t.Fatalf("after the pass: %v, same token %v, refreshes %d", err, tok2.AccessToken == first.AccessToken, svc.refreshes())
			}
			if recs := e.takeRecords(); len(recs) != 0 {
				t.Errorf("a refresh that changed no state wrote %+v", recs)
			}

			// Unused for longer than UsedWithin: left to be refreshed when next used.
			svc.clk.Advance(25 * time.Hour)
			e.pass(t)
			if svc.refreshes() != before+1 {
				t.Fatal("a connection nobody used for a day was refreshed")
			}
		})
	}
}

// The service refuses the refresh token (the person revoked the app there): the connection is
// revoked_upstream, one record says so with the service's code, and it is not asked again.
func TestRefresherRefusedRefresh(t *testing.T) {
	for _, svc := range services(t) {
		t.Run(svc.name, func(t *testing.T) {
			e := newRefreshEnv(t, svc, openSQLite(t))
			acct, tok := svc.connect(t)
			conn := e.save(t, acct, tok)
			if _, err := e.use(t, conn.ID); err != nil {
				t.Fatal(err)
			}
			svc.refuse()
			svc.clk.Advance(55 * time.Minute)
			if p := e.pass(t); p.Failed != 1 {
				t.Fatalf("pass %+v", p)
			}
			if got := e.state(t, conn.ID).Status; got != store.ConnectionRevokedUpstream {
				t.Fatalf("state %q, want revoked_upstream", got)
			}
			recs := e.takeRecords()
			if len(recs) != 1 {
				t.Fatalf("records %+v", recs)
			}
			r := recs[0]
			if r.Action != events.ConnectionRefreshFailed || r.Outcome != store.OutcomeRefused || r.Reason != upstream.ReasonRevokedUpstream ||
				r.Actor != "system" || r.Target != "person-alice" || r.Connector != svc.c.Key || r.Details["connection_id"] != conn.ID ||
				r.Details["state"] != "revoked_upstream" || r.Details["previous_state"] != "active" || r.Details["trigger"] != "ahead" ||
				r.Details["error"] != svc.code || r.Details["account"] != acct.Name {
				t.Fatalf("record %+v", r)
			}
			// The agent's exchange is refused with a reconnect, without asking the service.
			calls := svc.refreshes()
			if _, err := e.use(t, conn.ID); !errors.Is(err, upstream.ErrReconnect) {
				t.Fatalf("exchange of a revoked connection: %v", err)
			}
			e.pass(t)
			if svc.refreshes() != calls || len(e.takeRecords()) != 0 {
				t.Fatal("a revoked connection was refreshed or reported again")
			}
		})
	}
}

// An outage (5xx) is not a revocation: the connection is expiring, still hands out its live
// token, keeps its refresh token, is reported once; when the service is back it is active
// again and the recovery is reported.
func TestRefresherTransientFailureAndRecovery(t *testing.T) {
	for _, svc := range services(t) {
		t.Run(svc.name, func(t *testing.T) {
			e := newRefreshEnv(t, svc, openSQLite(t))
			acct, tok := svc.connect(t)
			conn := e.save(t, acct, tok)
			if _, err := e.use(t, conn.ID); err != nil {
				t.Fatal(err)
			}
			svc.down(true)
			svc.clk.Advance(55 * time.Minute)
			if p := e.pass(t); p.Failed != 1 {
				t.Fatalf("pass %+v", p)
			}
			row := e.state(t, conn.ID)
			if row.Status != store.ConnectionExpiring || !bytes.Equal(row.RefreshToken, conn.RefreshToken) {
				t.Fatalf("after an outage: %q, refresh token kept %v", row.Status, bytes.Equal(row.RefreshToken, conn.RefreshToken))
			}
			recs := e.takeRecords()
			if len(recs) != 1 || recs[0].Action != events.ConnectionRefreshFailed || recs[0].Outcome != store.OutcomeFailed ||
				recs[0].Reason != upstream.ReasonUpstreamError || recs[0].Details["state"] != "expiring" {
				t.Fatalf("records %+v", recs)
			}
			// The live token still reaches the agent.
			if _, err := e.use(t, conn.ID); err != nil {
				t.Fatalf("exchange of an expiring connection: %v", err)
			}
			// Still down: tried again, reported once only, never broken.
			svc.clk.Advance(time.Minute)
			calls := svc.refreshes()
			e.pass(t)
			if svc.refreshes() != calls+1 || len(e.takeRecords()) != 0 || e.state(t, conn.ID).Status != store.ConnectionExpiring {
				t.Fatal("a second failed pass reported again or changed the state")
			}
			// Back up.
			svc.down(false)
			svc.clk.Advance(time.Minute)
			if p := e.pass(t); p.Refreshed != 1 {
				t.Fatalf("pass %+v", p)
			}
			if got := e.state(t, conn.ID).Status; got != store.ConnectionActive {
				t.Fatalf("after recovery: %q", got)
			}
			recs = e.takeRecords()
			if len(recs) != 1 || recs[0].Action != events.ConnectionRecovered || recs[0].Outcome != store.OutcomeSuccess ||
				recs[0].Details["previous_state"] != "expiring" || recs[0].Details["state"] != "active" {
				t.Fatalf("records %+v", recs)
			}
		})
	}
}

// The token expires with an outage on: the agent's own exchange fails for now, and the
// connection stays expiring rather than needing a reconnect.
func TestTransientFailureOnUseIsNotBroken(t *testing.T) {
	svc := services(t)[0]
	e := newRefreshEnv(t, svc, openSQLite(t))
	acct, tok := svc.connect(t)
	conn := e.save(t, acct, tok)
	svc.down(true)
	svc.clk.Advance(2 * time.Hour)
	if _, err := e.use(t, conn.ID); err == nil || errors.Is(err, upstream.ErrReconnect) {
		t.Fatalf("exchange during an outage: %v", err)
	}
	if got := e.state(t, conn.ID).Status; got != store.ConnectionExpiring {
		t.Fatalf("state %q", got)
	}
	if recs := e.takeRecords(); len(recs) != 1 || recs[0].Details["trigger"] != "use" {
		t.Fatalf("records %+v", recs)
	}
	svc.down(false)
	if _, err := e.use(t, conn.ID); err != nil {
		t.Fatal(err)
	}
	if got := e.state(t, conn.ID).Status; got != store.ConnectionActive {
		t.Fatalf("state %q", got)
	}
}

// Without a refresh token nothing can renew the token: it is expiring near its end and
// needs_reconnect after it, each said once, and the service is never asked.
func TestRefresherWithoutRefreshToken(t *testing.T) {
	clk := testclock.New(time.Date(2026, 11, 3, 9, 0, 0, 0, time.UTC))
	svc := &service{name: "none", clk: clk, c: &config.Connector{Key: "default/svc", TokenURL: "http://127.0.0.1:1/never-called"}}
	e := newRefreshEnv(t, svc, openSQLite(t))
	conn := e.save(t, upstream.Account{ID: "1", Name: "alice"}, &oauth2.Token{AccessToken: "at", ExpiresIn: 3600})
	clk.Advance(30 * time.Minute)
	e.pass(t)
	if e.state(t, conn.ID).Status != store.ConnectionActive || len(e.takeRecords()) != 0 {
		t.Fatal("changed before the window")
	}
	clk.Advance(25 * time.Minute)
	e.pass(t)
	recs := e.takeRecords()
	if e.state(t, conn.ID).Status != store.ConnectionExpiring || len(recs) != 1 || recs[0].Reason != upstream.ReasonNoRefreshToken {
		t.Fatalf("in the window: %q, %+v", e.state(t, conn.ID).Status, recs)
	}
	e.pass(t)
	if len(e.takeRecords()) != 0 {
		t.Fatal("reported twice")
	}
	if _, err := e.use(t, conn.ID); err != nil {
		t.Fatalf("an expiring token that still works: %v", err)
	}
	clk.Advance(10 * time.Minute)
	e.pass(t)
	recs = e.takeRecords()
	if e.state(t, conn.ID).Status != store.ConnectionNeedsReconnect || len(recs) != 1 || recs[0].Details["previous_state"] != "expiring" {
		t.Fatalf("expired: %q, %+v", e.state(t, conn.ID).Status, recs)
	}
	if _, err := e.use(t, conn.ID); !errors.Is(err, upstream.ErrReconnect) {
		t.Fatalf("exchange: %v", err)
	}
}

// Two replicas' refreshers run their passes at the same moment over one database: the
// service sees one refresh of the connection, and the rotated refresh token is the one kept.
func TestRefresherTwoReplicasRefreshOnce(t *testing.T) {
	stores := map[string]func(t *testing.T) (store.Store, store.Store){
		"sqlite": func(t *testing.T) (store.Store, store.Store) { s := openSQLite(t); return s, s },
		"postgres": func(t *testing.T) (store.Store, store.Store) {
			dsn := postgresDSN(t)
			var out []store.Store
			for range 2 {
				s, err := sqlstore.Open(t.Context(), dsn)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
				out = append(out, s)
			}
			return out[0], out[1]
		},
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			a, b := open(t)
			g := newGitHub(t, time.Hour)
			svc := services(t)[0]
			svc.c, svc.clk = g.c, g.clk
			svc.refreshes = func() int { return int(g.fake.RefreshCalls()) }
			ea, eb := newRefreshEnv(t, svc, a), newRefreshEnv(t, svc, b)
			v := upstream.NewVerifier()
			acct, tok, err := upstream.Exchange(t.Context(), nil, g.c, g.authorize(t, "alice", "s", v).Get("code"), v)
			if err != nil {
				t.Fatal(err)
			}
			conn := ea.save(t, acct, tok)
			if err := a.TouchConnections(t.Context(), []store.ConnectionUse{{Project: project, ID: conn.ID, At: g.clk.Now()}}); err != nil {
				t.Fatal(err)
			}
			g.clk.Advance(55 * time.Minute)
			g.fake.SetDelay(20 * time.Millisecond) // both passes reach the connection while the first refresh is out
			var wg sync.WaitGroup
			passes := make([]upstream.Pass, 2)
			for i, e := range []*refreshEnv{ea, eb} {
				wg.Go(func() { passes[i] = e.pass(t) })
			}
			wg.Wait()
			if got := g.fake.RefreshCalls(); got != 1 {
				t.Fatalf("the service saw %d refreshes, want 1 (passes %+v)", got, passes)
			}
			// The kept refresh token is the rotated one: the next refresh works.
			g.fake.SetDelay(0)
			g.clk.Advance(2 * time.Hour)
			if _, err := ea.use(t, conn.ID); err != nil || g.fake.RefreshCalls() != 2 {
				t.Fatalf("next refresh: %v, calls %d", err, g.fake.RefreshCalls())
			}
		})
	}
}

// Uses are remembered in memory and written at most once per interval: an exchange costs the
// store nothing for it.
func TestUsesAreWrittenOncePerInterval(t *testing.T) {
	svc := services(t)[0]
	st := &touchCounter{Store: openSQLite(t)}
	e := newRefreshEnv(t, svc, st)
	acct, tok := svc.connect(t)
	conn := e.save(t, acct, tok)
	for range 5 {
		if _, err := e.use(t, conn.ID); err != nil {
			t.Fatal(err)
		}
	}
	if st.touches != 0 {
		t.Fatal("an exchange wrote its use")
	}
	e.pass(t)
	if st.touches != 1 || st.uses != 1 {
		t.Fatalf("touches %d, uses %d", st.touches, st.uses)
	}
	svc.clk.Advance(time.Minute)
	e.use(t, conn.ID)
	e.pass(t)
	if st.uses != 1 {
		t.Fatal("a use a minute after the last recorded one was written")
	}
	svc.clk.Advance(upstream.UseInterval)
	e.use(t, conn.ID)
	e.pass(t)
	if st.uses != 2 {
		t.Fatal("a use an interval later was not written")
	}
}

type touchCounter struct {
	store.Store
	touches, uses int
}

func (c *touchCounter) TouchConnections(ctx context.Context, uses []store.ConnectionUse) error {
	if err := c.Store.TouchConnections(ctx, uses); err != nil {
		return err
	}
	c.touches++
	c.uses += len(uses)
	return nil
}

// Start stops when its context ends, recording the uses it still holds.
func TestRefresherStopsOnShutdown(t *testing.T) {
	svc := services(t)[0]
	st := &touchCounter{Store: openSQLite(t)}
	e := newRefreshEnv(t, svc, st)
	acct, tok := svc.connect(t)
	conn := e.save(t, acct, tok)
	e.r.Every = time.Hour
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- e.r.Start(ctx) }()
	e.use(t, conn.ID)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st.uses != 1 {
		t.Fatalf("uses recorded at shutdown: %d", st.uses)
	}
}

// At most Workers refreshes are out at once.
func TestRefresherBoundsConcurrency(t *testing.T) {
	clk := testclock.New(time.Date(2026, 11, 3, 9, 0, 0, 0, time.UTC))
	var mu sync.Mutex
	inFlight, most := 0, 0
	release := make(chan struct{})
	srv := newTokenServer(t, func() {
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		mu.Unlock()
		<-release
		mu.Lock()
		inFlight--
		mu.Unlock()
	})
	svc := &service{name: "svc", clk: clk, c: srv}
	st := openSQLite(t)
	e := newRefreshEnv(t, svc, st)
	e.r.Workers = 2
	var uses []store.ConnectionUse
	for i := range 6 {
		conn := store.Connection{ID: "c" + string(rune('0'+i)), Project: project, Subject: "p", Connector: srv.Key,
			AccountID: string(rune('0' + i)), CreatedAt: clk.Now()}
		e.v.Seal(&conn, &oauth2.Token{AccessToken: "at", RefreshToken: "rt", ExpiresIn: 60})
		if _, err := st.SaveConnection(t.Context(), conn); err != nil {
			t.Fatal(err)
		}
		uses = append(uses, store.ConnectionUse{Project: project, ID: conn.ID, At: clk.Now()})
	}
	if err := st.TouchConnections(t.Context(), uses); err != nil {
		t.Fatal(err)
	}
	done := make(chan upstream.Pass)
	go func() { p, _ := e.r.RunOnce(t.Context()); done <- p }()
	for range 6 {
		release <- struct{}{}
	}
	p := <-done
	if p.Refreshed != 6 || most > 2 || most == 0 {
		t.Fatalf("pass %+v, most refreshes at once %d", p, most)
	}
}

func TestJitter(t *testing.T) {
	for _, x := range []float64{0, 0.5, 0.999} {
		d := upstream.Jitter(time.Minute, x)
		if d < 30*time.Second || d >= 90*time.Second {
			t.Errorf("Jitter(1m, %v) = %v", x, d)
		}
	}
	if slices.Contains([]time.Duration{upstream.Jitter(time.Minute, 0.1)}, upstream.Jitter(time.Minute, 0.9)) {
		t.Error("no jitter")
	}
}

// newTokenServer is a token endpoint that runs hook for each request, then answers a refresh
// with new tokens; it returns its connector.
func newTokenServer(t *testing.T, hook func()) *config.Connector {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hook()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"access_token":"at-%d","refresh_token":"rt-%d","token_type":"Bearer","expires_in":3600}`, n.Add(1), n.Load())
	}))
	t.Cleanup(srv.Close)
	return &config.Connector{AllowedNetworks: netguard.Loopback, Key: "default/svc", ClientID: "c", ClientSecret: "s",
		TokenURL: srv.URL, CallbackURL: callbackURL}
}
