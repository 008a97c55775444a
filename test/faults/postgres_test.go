// Package faults breaks what Latchkey depends on while it serves, and checks that it fails
// cleanly, recovers by itself and loses nothing it had committed: PostgreSQL crashing and
// restarting under load, the Kubernetes API server going away, a connected service that stops
// answering. Each test logs what it measured (time to recover, requests failed, rows lost).
//
// The PostgreSQL test runs its own server (initdb into a temporary directory with the Debian
// binaries under /usr/lib/postgresql/*/bin), since it must stop and start it; the API server
// test needs KUBEBUILDER_ASSETS. Each skips without what it needs, except under CI=true.
package faults_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/test/stack"
	"latchkey.dev/latchkey/webhook/register"
)

// attempt is one operation of the load.
type attempt struct {
	worker     string
	start, end time.Time
	ok         bool
	// problem says what was wrong with a failed attempt's answer when it was not a clean
	// failure (anything but a 5xx in the protocol's own shape).
	problem string
}

type load struct {
	mu       sync.Mutex
	attempts []attempt
	// committed: what the server said it stored, to look for after the restart.
	tokens, links, grants, conns []string
}

func (l *load) record(a attempt) {
	l.mu.Lock()
	l.attempts = append(l.attempts, a)
	l.mu.Unlock()
}

func (l *load) add(list *[]string, v string) {
	l.mu.Lock()
	*list = append(*list, v)
	l.mu.Unlock()
}

func (l *load) snapshot() []attempt {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.attempts)
}

// cleanJSON is a clean failure of an API endpoint: a 5xx with an RFC 6749 error body saying
// server_error or temporarily_unavailable.
func cleanJSON(a stack.Answer, err error) string {
	if err != nil {
		return "transport error: " + err.Error()
	}
	if a.Status < 500 {
		return fmt.Sprintf("status %d %s", a.Status, a.Raw)
	}
	if !strings.HasPrefix(a.Header.Get("Content-Type"), "application/json") {
		return fmt.Sprintf("status %d with %s", a.Status, a.Header.Get("Content-Type"))
	}
	if e := a.Str("error"); e != "server_error" && e != "temporarily_unavailable" {
		return fmt.Sprintf("status %d error %q", a.Status, e)
	}
	return ""
}

// cleanPage is a clean failure of a page: a 5xx HTML page.
func cleanPage(p stack.Page, err error) string {
	if err != nil {
		return "transport error: " + err.Error()
	}
	if p.Status < 500 {
		return fmt.Sprintf("page status %d at %s", p.Status, p.URL)
	}
	if !strings.HasPrefix(p.Header.Get("Content-Type"), "text/html") {
		return fmt.Sprintf("page status %d with %s", p.Status, p.Header.Get("Content-Type"))
	}
	return ""
}

func TestPostgresRestartUnderLoad(t *testing.T) {
	// One worker registers a client every few milliseconds from this one address, on a clock
	// that does not move: far past the per-address registration limit, which is not under test.
	register.AddressBurst = 1 << 30
	pg := stack.StartPostgres(t)
	logins := make([]string, 3)
	for i := range logins {
		logins[i] = "conn-" + strconv.Itoa(i)
	}
	s := stack.New(t, stack.Options{DSN: pg.DSN, Replicas: 2, ExtraLogins: logins})
	ctx := context.Background()

	// What the load needs, made while the database is up.
	const people = 300
	refusalTokens := make([]string, people)
	for i := range refusalTokens {
		refusalTokens[i] = s.AccessToken(fmt.Sprintf("person%d@example.com", i), stack.Agent)
	}
	var connectedTokens []string
	for i, l := range logins {
		email := fmt.Sprintf("connected%d@example.com", i)
		s.ConnectGitHub(email, l)
		connectedTokens = append(connectedTokens, s.AccessToken(email, stack.Agent))
	}
	alice := s.Browser()
	if err := alice.SignIn(stack.AliceEmail, stack.AlicePassword); err != nil {
		t.Fatal(err)
	}
	aliceID := s.PersonID(stack.AliceEmail)

	l := &load{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	// Each worker repeats op until stopped; a pause keeps the load steady rather than flat out
	// on a shared machine.
	run := func(name string, op func(ctx context.Context) (ok bool, problem string)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				// A request that does not answer within this bound counts as a hang.
				ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				start := time.Now()
				ok, problem := op(ctx)
				cancel()
				l.record(attempt{worker: name, start: start, end: time.Now(), ok: ok, problem: problem})
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}

	run("client_credentials", func(ctx context.Context) (bool, string) {
		a, err := s.ClientCredentials(ctx)
		if err == nil && a.Status == http.StatusOK && a.Str("access_token") != "" {
			l.add(&l.tokens, a.Str("access_token"))
			return true, ""
		}
		return false, cleanJSON(a, err)
	})
	var next atomic.Int64
	run("exchange refused with a link", func(ctx context.Context) (bool, string) {
		tok := refusalTokens[int(next.Add(1)-1)%people]
		a, err := s.Exchange(ctx, tok)
		if err == nil && a.Status == http.StatusBadRequest && a.Str("reason") == "connect_required" && a.Str("connect_id") != "" {
			l.add(&l.links, a.Str("connect_id"))
			return true, ""
		}
		return false, cleanJSON(a, err)
	})
	var nextConn atomic.Int64
	run("exchange for a connected account", func(ctx context.Context) (bool, string) {
		a, err := s.Exchange(ctx, connectedTokens[int(nextConn.Add(1)-1)%len(connectedTokens)])
		if err == nil && a.Status == http.StatusOK && a.Str("access_token") != "" {
			return true, ""
		}
		return false, cleanJSON(a, err)
	})
	run("register, consent, redeem", func(ctx context.Context) (bool, string) {
		body, _ := json.Marshal(map[string]any{
			"client_name": "Load", "redirect_uris": []string{"http://127.0.0.1/load-cb"}, "token_endpoint_auth_method": "none",
			"grant_types": []string{"authorization_code"},
		})
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.Issuer+"/register", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		reg, err := stack.Do(req)
		if err != nil || reg.Status != http.StatusCreated {
			return false, cleanJSON(reg, err)
		}
		clientID := reg.Str("client_id")
		pk := stack.NewPKCE()
		code, err := alice.Authorize(clientID, "http://127.0.0.1/load-cb", "", "", "", pk)
		if err != nil {
			return false, pageProblem(err)
		}
		a, err := s.Post(ctx, "/token", url.Values{
			"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {"http://127.0.0.1/load-cb"},
			"code_verifier": {pk.Verifier}, "client_id": {clientID},
		}, "", "")
		if err == nil && a.Status == http.StatusOK {
			l.add(&l.grants, clientID)
			return true, ""
		}
		return false, cleanJSON(a, err)
	})
	var nextWriter atomic.Int64
	run("store writes a connection", func(ctx context.Context) (bool, string) {
		i := nextWriter.Add(1)
		now := s.Clock.Now()
		c, err := s.Admin.SaveConnection(ctx, store.Connection{
			ID: secret.New("")[:22], Project: stack.ProjectKey, Subject: "writer", Connector: s.Connector.Key,
			AccountID: strconv.FormatInt(i, 10), AccountName: "w" + strconv.FormatInt(i, 10), KeyID: "k",
			AccessToken: []byte("sealed"), TokenType: "Bearer", Status: store.ConnectionActive, CreatedAt: now, UpdatedAt: now,
		})
		if err == nil {
			l.add(&l.conns, c.ID)
			return true, ""
		}
		// The store's own error: nothing to check beyond that it returned.
		return false, ""
	})
	workers := 5

	// Readiness, polled on every replica as a kubelet would.
	type probe struct {
		at    time.Time
		ready bool
	}
	var probesMu sync.Mutex
	var probes []probe
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			for i := range s.Replicas {
				req, _ := http.NewRequest(http.MethodGet, s.Front.URL+"/-/readyz", nil)
				req.Header.Set(stack.ReplicaHeader, strconv.Itoa(i))
				a, err := stack.Do(req)
				probesMu.Lock()
				probes = append(probes, probe{time.Now(), err == nil && a.Status == http.StatusOK})
				probesMu.Unlock()
			}
		}
	}()

	succeeded := func(after time.Time) map[string]time.Time {
		first := map[string]time.Time{}
		for _, a := range l.snapshot() {
			if a.ok && a.start.After(after) {
				if f, ok := first[a.worker]; !ok || a.end.Before(f) {
					first[a.worker] = a.end
				}
			}
		}
		return first
	}
	waitAll := func(after time.Time, within time.Duration) map[string]time.Time {
		deadline := time.Now().Add(within)
		for {
			got := succeeded(after)
			if len(got) == workers {
				return got
			}
			if time.Now().After(deadline) {
				return got
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()

	began := time.Now()
	if got := waitAll(began, 30*time.Second); len(got) != workers {
		t.Fatalf("before the outage only %d of %d workers succeeded: %v", len(got), workers, got)
	}
	time.Sleep(300 * time.Millisecond)
	db, err := sql.Open("pgx", pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tables := []string{"grants", "connections", "links", "tokens", "clients"}
	count := func() map[string]int {
		out := map[string]int{}
		for _, tb := range tables {
			var n int
			if err := db.QueryRow(`SELECT count(*) FROM ` + tb).Scan(&n); err != nil {
				t.Fatalf("counting %s: %v", tb, err)
			}
			out[tb] = n
		}
		return out
	}
	before := count()

	down := time.Now()
	pg.Crash()
	// The outage: load keeps coming while the database is gone.
	time.Sleep(1500 * time.Millisecond)
	restarting := time.Now()
	pg.Start()
	up := time.Now()
	recovered := waitAll(up, 60*time.Second)
	if len(recovered) != workers {
		t.Fatalf("%.1fs after PostgreSQL came back only %v had succeeded again", time.Since(up).Seconds(), recovered)
	}
	// A little steady load after recovery, then stop.
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()
	ended := time.Now()

	var recovery time.Duration
	for _, at := range recovered {
		recovery = max(recovery, at.Sub(up))
	}
	lastRecovered := up.Add(recovery)

	// Every answer, at any time, was a success or a clean failure, in bounded time.
	var total, failedOutage, failedAfter, failedBefore, signInAgain int
	var slowest time.Duration
	perWorker := map[string][2]int{}
	for _, a := range l.snapshot() {
		total++
		slowest = max(slowest, a.end.Sub(a.start))
		if strings.HasPrefix(a.problem, degraded) {
			signInAgain++
			if a.end.Before(down) || a.start.After(lastRecovered) {
				t.Errorf("%s at %+.2fs with the database up: %s", a.worker, a.start.Sub(down).Seconds(), a.problem)
			}
		} else if a.problem != "" {
			t.Errorf("%s at %+.2fs: not a clean failure: %s", a.worker, a.start.Sub(down).Seconds(), a.problem)
		}
		if a.ok {
			continue
		}
		switch {
		case a.end.Before(down):
			failedBefore++
			t.Errorf("%s failed before the outage (%+.2fs)", a.worker, a.start.Sub(down).Seconds())
		case !a.start.After(lastRecovered):
			failedOutage++
			c := perWorker[a.worker]
			c[0]++
			perWorker[a.worker] = c
		default:
			failedAfter++
			c := perWorker[a.worker]
			c[1]++
			perWorker[a.worker] = c
		}
	}
	if slowest > 10*time.Second {
		t.Errorf("the slowest request took %v: a request must fail, not hang, while the database is down", slowest)
	}

	// Readiness followed the database.
	probesMu.Lock()
	var unreadyDuringOutage, unreadyAfter bool
	for _, p := range probes {
		if p.at.After(down.Add(200*time.Millisecond)) && p.at.Before(restarting) && !p.ready {
			unreadyDuringOutage = true
		}
		if p.at.After(lastRecovered.Add(time.Second)) && !p.ready {
			unreadyAfter = true
		}
	}
	lastReady := len(probes) > 0 && probes[len(probes)-1].ready
	probesMu.Unlock()
	if !unreadyDuringOutage {
		t.Error("/-/readyz never reported unready while PostgreSQL was down")
	}
	if unreadyAfter || !lastReady {
		t.Error("/-/readyz reported unready after the database had recovered")
	}

	// Nothing the server said it stored is gone.
	after := count()
	lost := map[string]int{}
	for _, tb := range tables {
		if after[tb] < before[tb] {
			t.Errorf("%s: %d rows before the restart, %d after", tb, before[tb], after[tb])
		}
	}
	bg := context.Background()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, tok := range l.tokens {
		if _, err := s.Admin.GetToken(bg, secret.Hash(tok)); err != nil {
			lost["tokens"]++
		}
	}
	for _, id := range l.links {
		if _, err := s.Admin.GetLink(bg, id); err != nil {
			lost["links"]++
		}
	}
	for _, id := range l.grants {
		if _, err := s.Admin.GetGrant(bg, stack.ProjectKey, aliceID, id); err != nil {
			lost["grants"]++
		}
	}
	for _, id := range l.conns {
		if _, err := s.Admin.GetConnection(bg, stack.ProjectKey, id); errors.Is(err, store.ErrNotFound) {
			lost["connections"]++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	for what, n := range lost {
		if n > 0 {
			t.Errorf("%d committed %s lost in the restart", n, what)
		}
	}

	t.Logf("PostgreSQL crashed (immediate shutdown) at +0.00s, down for %.2fs, accepting again at +%.2fs (WAL recovery included)",
		restarting.Sub(down).Seconds(), up.Sub(down).Seconds())
	t.Logf("recovery: every kind of request succeeded again %.3fs after PostgreSQL accepted connections (per kind: %s)",
		recovery.Seconds(), describe(recovered, up))
	t.Logf("requests: %d in %.1fs; failed cleanly during the outage: %d; failed after recovery: %d; slowest answer %v",
		total, ended.Sub(began).Seconds(), failedOutage, failedAfter, slowest.Round(time.Millisecond))
	t.Logf("failures per kind (outage, after): %v; of them sent to the sign-in page because the session could not be read: %d", perWorker, signInAgain)
	if signInAgain != 0 {
		t.Errorf("%d requests were sent to sign in because the session could not be read; a page that cannot read the session answers 503", signInAgain)
	}
	t.Logf("rows before → after: %v → %v; committed and verified after the restart: %d tokens, %d links, %d grants, %d connections; lost: %d",
		before, after, len(l.tokens), len(l.links), len(l.grants), len(l.conns), sum(lost))
}

func describe(at map[string]time.Time, since time.Time) string {
	var parts []string
	for w, t := range at {
		parts = append(parts, fmt.Sprintf("%s %.3fs", w, t.Sub(since).Seconds()))
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// degraded marks an answer that is safe but not an error page: a page that needs the person's
// session showing the sign-in form because the session could not be read. Pages answer 503
// instead (signin.Lookup), so the test expects none.
const degraded = "degraded: "

// pageProblem classifies a browser flow that stopped: a 5xx page is a clean failure.
func pageProblem(err error) string {
	var se *stack.StepError
	if errors.As(err, &se) {
		if se.Err != nil && se.Err.Error() == "asked to sign in again" {
			return degraded + "sent to the sign-in page at " + se.Page.URL
		}
		// RFC 6749 §4.1.2.1: once the client and its redirect URI are verified, the
		// authorization endpoint reports its own failure to the client, at that address.
		if loc, err := url.Parse(se.Page.Location()); err == nil && strings.HasPrefix(loc.String(), "http://127.0.0.1/load-cb?") {
			if e := loc.Query().Get("error"); e == "server_error" || e == "temporarily_unavailable" {
				return ""
			}
		}
		return cleanPage(se.Page, se.Err)
	}
	return err.Error()
}

// The same on the embedded store: with the database closed, /-/readyz says so and requests
// that need it fail as server_error, in the protocol's shape.
func TestReadyzFollowsTheStore(t *testing.T) {
	s := stack.New(t, stack.Options{DSN: "sqlite:" + t.TempDir() + "/latchkey.db"})
	readyz := func() (int, string) {
		req, _ := http.NewRequest(http.MethodGet, s.Front.URL+"/-/readyz", nil)
		a, err := stack.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return a.Status, string(a.Raw)
	}
	if status, body := readyz(); status != http.StatusOK {
		t.Fatalf("/-/readyz with the store up: %d %s", status, body)
	}
	s.Replicas[0].Store.Close()
	if status, body := readyz(); status != http.StatusServiceUnavailable || !strings.Contains(body, "store unavailable") {
		t.Errorf("/-/readyz with the store closed: %d %q; want 503 store unavailable", status, body)
	}
	a, err := s.ClientCredentials(context.Background())
	if problem := cleanJSON(a, err); problem != "" {
		t.Errorf("client_credentials with the store closed: %s", problem)
	}
}
