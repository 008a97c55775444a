package sqlstore

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

// seedConnections stores n connections of n/10 people in project p, in statements of 500 rows.
func seedConnections(b *testing.B, s *Store, p string, n int) {
	b.Helper()
	ctx := b.Context()
	sealed := make([]byte, 160) // about what an AEAD-sealed GitHub token takes
	for first := 0; first < n; first += 500 {
		err := s.tx(ctx, func(x q) error {
			for i := first; i < min(first+500, n); i++ {
				_, err := x.exec(ctx, `INSERT INTO connections (`+connectionCols+`, version)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1)`,
					fmt.Sprintf("%032x", i), p, "person-"+strconv.Itoa(i/10), "team-a/github", strconv.Itoa(i),
					"login-"+strconv.Itoa(i), "k1", sealed, sealed, "bearer", nil, `["repo"]`, "active", ns(bench), ns(bench))
				if err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	if s.postgres() {
		// What autovacuum does soon after a bulk load: without statistics the planner reads
		// every row after the page key and sorts them (bounded memory still: a top-N sort of
		// the page), instead of walking the index for one page.
		if _, err := s.w.ExecContext(ctx, `ANALYZE connections`); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAdminListConnections walks every page (100 connections each) of a Project's
// connections, as `kubectl get connections` does with --chunk-size, for 1,000 and 10,000
// connections. It reports the cost of one page: time, allocations and bytes allocated, and
// the most the Go heap held above its starting point while walking. A page costing the same
// at 1,000 and 10,000 connections is the claim: memory is bounded by the page, not the total.
func BenchmarkAdminListConnections(b *testing.B) {
	for _, be := range backends[:2] {
		for _, total := range []int{1000, 10000} {
			b.Run(fmt.Sprintf("%s/%d", be.name, total), func(b *testing.B) {
				s := openTest(b, be.dsn(b))
				seedConnections(b, s, "team-a/demo", total)
				ctx := context.Background()
				walk := func() (pages int, peak uint64) {
					var ms runtime.MemStats
					runtime.GC()
					runtime.ReadMemStats(&ms)
					start := ms.HeapAlloc
					q := store.AdminQuery{Projects: []string{"team-a/demo"}, Limit: 100}
					for {
						rows, next, err := s.ListConnectionsPage(ctx, q)
						if err != nil {
							b.Fatal(err)
						}
						if len(rows) == 0 {
							b.Fatal("empty page")
						}
						pages++
						if pages%10 == 0 {
							runtime.ReadMemStats(&ms)
							peak = max(peak, ms.HeapAlloc-min(ms.HeapAlloc, start))
						}
						if next == nil {
							return pages, peak
						}
						q.After = next
					}
				}
				var peak uint64
				pages := 0
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					var p uint64
					pages, p = walk()
					peak = max(peak, p)
				}
				b.StopTimer()
				if pages != total/100 {
					b.Fatalf("%d pages for %d connections", pages, total)
				}
				per := float64(b.N * pages)
				b.ReportMetric(float64(b.Elapsed().Microseconds())/per, "µs/page")
				b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MB")
			})
		}
	}
}

// BenchmarkAdminListConnectionsPage measures one page deep in the list (after the first
// half), so allocs/op and B/op are one page's: compare 1,000 with 10,000.
func BenchmarkAdminListConnectionsPage(b *testing.B) {
	for _, be := range backends[:2] {
		for _, total := range []int{1000, 10000} {
			b.Run(fmt.Sprintf("%s/%d", be.name, total), func(b *testing.B) {
				s := openTest(b, be.dsn(b))
				seedConnections(b, s, "team-a/demo", total)
				q := store.AdminQuery{Projects: []string{"team-a/demo"}, Limit: 100,
					After: []string{"team-a/demo", fmt.Sprintf("%032x", total/2)}}
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					rows, _, err := s.ListConnectionsPage(b.Context(), q)
					if err != nil || len(rows) != 100 {
						b.Fatal(len(rows), err)
					}
				}
			})
		}
	}
}

// BenchmarkAdminEndPersonAccess ends the access of a person holding 1,000 live tokens (500
// access/refresh pairs at 10 clients), 10 grants, 5 connections and sessions, in one
// transaction; each iteration seeds a fresh person outside the timer.
func BenchmarkAdminEndPersonAccess(b *testing.B) {
	for _, be := range backends[:2] {
		b.Run(be.name, func(b *testing.B) {
			s := openTest(b, be.dsn(b))
			ctx := b.Context()
			// Other people's tokens around, so the revocation has to find hers among them.
			for i := range int64(5000) {
				a, r := benchPair("other", i)
				if err := s.CreateTokens(ctx, a, r); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			b.StopTimer()
			for n := range b.N {
				subject := "leaver-" + strconv.Itoa(n)
				if _, err := s.UpsertPerson(ctx, store.Person{Project: "bench/p", ID: subject, Source: "password",
					SourceSubject: subject, Email: subject + "@example.com", CreatedAt: bench}); err != nil {
					b.Fatal(err)
				}
				var toks []store.Token
				for i := range int64(500) {
					a, r := benchPair(subject+"-"+strconv.FormatInt(i, 10), i)
					a.Subject, r.Subject = subject, subject
					toks = append(toks, a, r)
				}
				if err := s.CreateTokens(ctx, toks...); err != nil {
					b.Fatal(err)
				}
				for c := range 10 {
					if err := s.UpsertGrant(ctx, store.Grant{Project: "bench/p", Subject: subject, ClientID: "c" + strconv.Itoa(c),
						CreatedAt: bench, UpdatedAt: bench}); err != nil {
						b.Fatal(err)
					}
					if err := s.CreateSession(ctx, store.Session{IDHash: hashOf(subject + strconv.Itoa(c)), Project: "bench/p",
						Subject: subject, AuthTime: bench, CreatedAt: bench, ExpiresAt: bench.Add(time.Hour)}); err != nil {
						b.Fatal(err)
					}
				}
				for c := range 5 {
					if _, err := s.SaveConnection(ctx, store.Connection{ID: subject + "-conn-" + strconv.Itoa(c), Project: "bench/p",
						Subject: subject, Connector: "bench/github", AccountID: strconv.Itoa(c), KeyID: "k1", TokenType: "bearer",
						CreatedAt: bench, UpdatedAt: bench}); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
				ended, err := s.EndPersonAccess(ctx, "bench/p", subject, bench.Add(time.Minute))
				b.StopTimer()
				if err != nil {
					b.Fatal(err)
				}
				if ended.Tokens != 1000 || ended.Grants != 10 || len(ended.Connections) != 5 || ended.Sessions != 10 {
					b.Fatalf("ended %+v", ended)
				}
			}
		})
	}
}
