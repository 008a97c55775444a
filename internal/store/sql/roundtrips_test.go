package sqlstore

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/internal/store/sql/pgtest"
)

// roundTrips counts what the client sends to PostgreSQL and waits for: every statement
// (BEGIN, COMMIT and ROLLBACK included) is one round trip, and so is a pipelined batch,
// whatever it holds. Statement preparation on a connection's first use of a query is not
// counted; the test warms every query up first.
type roundTrips struct{ n atomic.Int64 }

func (c *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (c *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (c *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

var _ pgx.BatchTracer = (*roundTrips)(nil)

// countRoundTrips has the store's PostgreSQL connections report to c.
func countRoundTrips(c *roundTrips) Option { return func(s *Store) { s.tracer = c } }

// TestPostgresRoundTrips pins how many round trips to PostgreSQL each store operation on the
// request hot paths costs (docs/performance.md, "Round trips per hot path"). A change that
// adds one fails here; one that removes one updates the figure and the table.
func TestPostgresRoundTrips(t *testing.T) {
	ctx := context.Background()
	var c roundTrips
	s, err := Open(ctx, pgtest.DSN(t), countRoundTrips(&c))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	// One connection: every operation then runs on a connection that already prepared its
	// statements in the warm-up round, and the count does not depend on which one it got.
	s.w.SetMaxOpenConns(1)

	now := time.Now().UTC().Truncate(time.Microsecond)
	const project, client, subject, connector = "ns/p", "agent", "alice", "ns/github"
	seq := 0
	next := func(prefix string) string { seq++; return fmt.Sprintf("%s-%d", prefix, seq) }
	token := func(kind store.TokenKind, family string, gen int) store.Token {
		return store.Token{
			Hash: hashOf(next("tok")), Kind: kind, Project: project, ClientID: client, Subject: subject,
			Scopes: []string{"openid"}, FamilyID: family, Generation: gen, CodeHash: hashOf("code-" + family),
			AuthTime: now, IssuedAt: now, ExpiresAt: now.Add(time.Hour),
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	conn, err := s.SaveConnection(ctx, store.Connection{
		ID: "conn-1", Project: project, Subject: subject, Connector: connector, AccountID: "1", AccountName: "alice",
		KeyID: "k", AccessToken: []byte("sealed"), TokenType: "bearer", CreatedAt: now, UpdatedAt: now,
	})
	must(err)
	must(s.AllowAgent(ctx, store.AgentPermission{Project: project, Subject: subject, Connector: connector,
		ClientID: client, ConnectionID: conn.ID, CreatedAt: now}))

	// Each case prepares its own data (not counted) and returns the operation to count.
	cases := []struct {
		name string
		want int64
		prep func() func() error
	}{
		{"GetToken", 1, func() func() error {
			tok := token(store.AccessToken, next("fam"), 0)
			must(s.CreateTokens(ctx, tok))
			return func() error { _, err := s.GetToken(ctx, tok.Hash); return err }
		}},
		{"AgentAccess", 1, func() func() error {
			return func() error {
				a, err := s.AgentAccess(ctx, project, subject, connector, client)
				if err == nil && a.Allowed != conn.ID {
					err = fmt.Errorf("allowed %q, want %q", a.Allowed, conn.ID)
				}
				return err
			}
		}},
		{"TokenHolder", 1, func() func() error {
			tok := token(store.RefreshToken, next("fam"), 0)
			must(s.CreateTokens(ctx, tok))
			return func() error { _, _, _, err := s.TokenHolder(ctx, tok.Hash); return err }
		}},
		{"SubjectAccess", 1, func() func() error {
			tok := token(store.AccessToken, next("fam"), 0)
			must(s.CreateTokens(ctx, tok))
			return func() error {
				_, a, err := s.SubjectAccess(ctx, tok.Hash, connector)
				if err == nil && a.Allowed != conn.ID {
					err = fmt.Errorf("allowed %q, want %q", a.Allowed, conn.ID)
				}
				return err
			}
		}},
		// A person with five accounts at the connector (the agent allowed the third) costs the
		// exchange the same one round trip as a person with one.
		{"SubjectAccess (5 connections)", 1, func() func() error {
			bob := next("bob")
			var allowed string
			for i := range 5 {
				c, err := s.SaveConnection(ctx, store.Connection{
					ID: next("conn"), Project: project, Subject: bob, Connector: connector, AccountID: next("acct"),
					AccountName: fmt.Sprintf("bob-%d", i), KeyID: "k", AccessToken: []byte("sealed"), TokenType: "bearer",
					CreatedAt: now, UpdatedAt: now,
				})
				must(err)
				if i == 2 {
					allowed = c.ID
				}
			}
			must(s.AllowAgent(ctx, store.AgentPermission{Project: project, Subject: bob, Connector: connector,
				ClientID: client, ConnectionID: allowed, CreatedAt: now}))
			tok := token(store.AccessToken, next("fam"), 0)
			tok.Subject = bob
			must(s.CreateTokens(ctx, tok))
			return func() error {
				_, a, err := s.SubjectAccess(ctx, tok.Hash, connector)
				if err == nil && (a.Allowed != allowed || len(a.Connections) != 5) {
					err = fmt.Errorf("allowed %q of %d connections, want %q of 5", a.Allowed, len(a.Connections), allowed)
				}
				return err
			}
		}},
		// What QueueAudit's writer does with the records of 300 requests: one statement. The
		// queue is filled directly, so the writer's own timing cannot split the batch here.
		{"AppendAudits (300 queued records)", 1, func() func() error {
			var rows []auditRow
			for range 300 {
				row, err := encodeAudit(store.AuditRecord{Project: project, Time: now, Actor: "client:" + client,
					Action: "token.exchanged", Target: subject, ClientID: client, Connector: connector, Outcome: store.OutcomeSuccess})
				must(err)
				rows = append(rows, row)
			}
			s.audit.mu.Lock()
			s.audit.queued = append(s.audit.queued, rows...)
			s.audit.mu.Unlock()
			return func() error {
				n, err := s.flushAudit(ctx, 0)
				if err == nil && n != 300 {
					err = fmt.Errorf("wrote %d records, want 300", n)
				}
				return err
			}
		}},
		// A handout's record (token exchange, decision 0054), alone: the writer stores it with
		// one statement and the caller returns once that has committed. Under load the
		// exchanges in flight share that statement.
		{"AppendAuditBatched", 1, func() func() error {
			return func() error {
				return s.AppendAuditBatched(ctx, store.AuditRecord{Project: project, Time: now, Actor: "client:" + client,
					Action: "token.exchanged", Target: subject, ClientID: client, Connector: connector, Outcome: store.OutcomeSuccess})
			}
		}},
		{"AppendAudit", 1, func() func() error {
			return func() error {
				return s.AppendAudit(ctx, store.AuditRecord{Project: project, Time: now, Actor: "client:" + client,
					Action: "token.exchanged", Target: subject, ClientID: client, Connector: connector, Outcome: store.OutcomeSuccess})
			}
		}},
		{"CreateTokens", 1, func() func() error {
			fam := next("fam")
			a, r := token(store.AccessToken, fam, 0), token(store.RefreshToken, fam, 0)
			return func() error { return s.CreateTokens(ctx, a, r) }
		}},
		{"RedeemAuthCode", 2, func() func() error {
			code := store.AuthCode{Hash: hashOf(next("code")), Project: project, ClientID: client, Subject: subject,
				RedirectURI: "https://app.example/cb", CodeChallengeMethod: "S256", CodeChallenge: "x",
				AuthTime: now, ExpiresAt: now.Add(time.Minute), CreatedAt: now}
			must(s.CreateAuthCode(ctx, code))
			return func() error {
				_, err := s.RedeemAuthCode(ctx, code.Hash, now, func(store.AuthCode) error { return nil })
				return err
			}
		}},
		{"RotateRefreshToken", 1, func() func() error {
			fam := next("fam")
			old := token(store.RefreshToken, fam, 0)
			must(s.CreateTokens(ctx, token(store.AccessToken, fam, 0), old))
			a, r := token(store.AccessToken, fam, 1), token(store.RefreshToken, fam, 1)
			return func() error {
				rot, err := s.RotateRefreshToken(ctx, store.RotateRequest{OldHash: old.Hash, New: []store.Token{a, r},
					Sealed: []byte("sealed"), Now: now, Grace: time.Minute})
				if err == nil && rot.Outcome != store.OutcomeRotated {
					err = fmt.Errorf("outcome %v, want rotated", rot.Outcome)
				}
				return err
			}
		}},
	}
	for round := range 2 {
		for _, tc := range cases {
			op := tc.prep()
			before := c.n.Load()
			if err := op(); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			got := c.n.Load() - before
			if round == 0 {
				continue // warm-up: the connection prepares each statement once
			}
			t.Logf("%s: %d round trips", tc.name, got)
			if got != tc.want {
				t.Errorf("%s: %d round trips to PostgreSQL, want %d", tc.name, got, tc.want)
			}
		}
	}
}

// BenchmarkExchangeReads is token exchange's read of the subject token and the agent's access
// (SubjectAccess) for a person with 1 and with 5 accounts at the connector, on SQLite and, when
// LATCHKEY_TEST_POSTGRES_DSN is set, PostgreSQL, where it also reports round trips per read
// (docs/performance.md, "Several accounts per person"):
//
//	go test ./internal/store/sql -run '^$' -bench ExchangeReads -benchtime 3s
func BenchmarkExchangeReads(b *testing.B) {
	open := map[string]func(b *testing.B, c *roundTrips) *Store{
		"sqlite": func(b *testing.B, _ *roundTrips) *Store {
			s, err := Open(context.Background(), "sqlite:"+b.TempDir()+"/bench.db")
			if err != nil {
				b.Fatal(err)
			}
			return s
		},
		"postgres": func(b *testing.B, c *roundTrips) *Store {
			s, err := Open(context.Background(), pgtest.DSN(b), countRoundTrips(c))
			if err != nil {
				b.Fatal(err)
			}
			return s
		},
	}
	for _, backend := range []string{"sqlite", "postgres"} {
		for _, n := range []int{1, 5} {
			b.Run(fmt.Sprintf("%s/%d-connections", backend, n), func(b *testing.B) {
				var c roundTrips
				s := open[backend](b, &c)
				b.Cleanup(func() { s.Close() })
				ctx := context.Background()
				now := time.Now().UTC().Truncate(time.Microsecond)
				const project, client, subject, connector = "ns/p", "agent", "alice", "ns/github"
				var allowed string
				for i := range n {
					conn, err := s.SaveConnection(ctx, store.Connection{
						ID: fmt.Sprintf("conn-%d", i), Project: project, Subject: subject, Connector: connector,
						AccountID: fmt.Sprintf("%d", i), AccountName: fmt.Sprintf("alice-%d", i), KeyID: "k",
						AccessToken: []byte("sealed"), TokenType: "bearer", CreatedAt: now, UpdatedAt: now,
					})
					if err != nil {
						b.Fatal(err)
					}
					allowed = conn.ID
				}
				if err := s.AllowAgent(ctx, store.AgentPermission{Project: project, Subject: subject, Connector: connector,
					ClientID: client, ConnectionID: allowed, CreatedAt: now}); err != nil {
					b.Fatal(err)
				}
				tok := store.Token{Hash: hashOf("tok"), Kind: store.AccessToken, Project: project, ClientID: client,
					Subject: subject, Scopes: []string{"openid"}, FamilyID: "fam", AuthTime: now, IssuedAt: now,
					ExpiresAt: now.Add(time.Hour)}
				if err := s.CreateTokens(ctx, tok); err != nil {
					b.Fatal(err)
				}
				if _, _, err := s.SubjectAccess(ctx, tok.Hash, connector); err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				before := c.n.Load()
				b.ResetTimer()
				for range b.N {
					_, a, err := s.SubjectAccess(ctx, tok.Hash, connector)
					if err != nil || a.Allowed != allowed || len(a.Connections) != n {
						b.Fatalf("allowed %q of %d connections (%v)", a.Allowed, len(a.Connections), err)
					}
				}
				b.StopTimer()
				if backend == "postgres" {
					b.ReportMetric(float64(c.n.Load()-before)/float64(b.N), "round-trips/op")
				}
			})
		}
	}
}
