package webhook_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/mcp/dpop"
	"latchkey.dev/latchkey/test/stack"
)

// The benchmarks call the server's handler directly (no sockets) from 16 goroutines and
// report requests per second and the 99th percentile latency next to ns/op:
//
//	go test ./webhook -run '^$' -bench . -benchtime 5s
//
// PostgreSQL runs too when LATCHKEY_TEST_POSTGRES_DSN is set.

const benchConcurrency = 16

func backends(b *testing.B, fn func(b *testing.B, h *stack.Stack)) {
	b.Run("sqlite", func(b *testing.B) { fn(b, stack.New(b, stack.Options{})) })
	b.Run("postgres", func(b *testing.B) { fn(b, stack.New(b, stack.Options{DSN: stack.PostgresDSN(b)})) })
}

// serveFunc serves one request, timing it.
type serveFunc func(*http.Request) *httptest.ResponseRecorder

// run starts benchConcurrency goroutines; each makes a worker with newWorker and calls it once
// per iteration. A worker returns false when its request failed.
func run(b *testing.B, h *stack.Stack, newWorker func() func(serve serveFunc) bool) {
	b.Helper()
	var mu sync.Mutex
	var lat []time.Duration
	var failed atomic.Int64
	b.SetParallelism(max(1, benchConcurrency/runtime.GOMAXPROCS(0)))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		work := newWorker()
		mine := make([]time.Duration, 0, 1024)
		serve := func(r *http.Request) *httptest.ResponseRecorder {
			w := httptest.NewRecorder()
			t0 := time.Now()
			h.Server().ServeHTTP(w, r)
			mine = append(mine, time.Since(t0))
			return w
		}
		for pb.Next() {
			if !work(serve) && failed.Add(1) == 1 {
				b.Error("a request failed")
			}
		}
		mu.Lock()
		lat = append(lat, mine...)
		mu.Unlock()
	})
	elapsed := time.Since(start)
	b.StopTimer()
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "req/s")
	b.ReportMetric(float64(lat[len(lat)*99/100])/float64(time.Millisecond), "p99-ms")
}

func tokenRequest(form url.Values, user, pass string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "http://bench/team/demo/token", strings.NewReader(form.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if user != "" {
		r.SetBasicAuth(user, pass)
	}
	return r
}

// benchPerson is the person the codes and refresh tokens of the benchmarks are for: Alice,
// who signs in with a password the Project lists (a token of someone it no longer lists is
// refused).
func benchPerson(b *testing.B, h *stack.Stack) string {
	p, err := h.Store().UpsertPerson(context.Background(), store.Person{Project: stack.ProjectKey, ID: "p-bench", Source: "password",
		SourceSubject: stack.AliceEmail, CreatedAt: h.Clock.Now()})
	if err != nil {
		b.Fatal(err)
	}
	return p.ID
}

func BenchmarkClientCredentials(b *testing.B) {
	backends(b, func(b *testing.B, h *stack.Stack) {
		form := url.Values{"grant_type": {"client_credentials"}, "scope": {"read"}}
		run(b, h, func() func(serveFunc) bool {
			return func(serve serveFunc) bool {
				return serve(tokenRequest(form, stack.Service, stack.ServiceSecret)).Code == http.StatusOK
			}
		})
	})
}

// BenchmarkClientCredentialsDPoP is BenchmarkClientCredentials with a DPoP proof (ES256) on
// every request, so the token is bound to the client's key: the difference is what checking a
// proof costs the server (signature, claims, and recording its jti in the store). Proofs are
// made before the timer starts; signing is the client's cost.
func BenchmarkClientCredentialsDPoP(b *testing.B) {
	backends(b, func(b *testing.B, h *stack.Stack) {
		form := url.Values{"grant_type": {"client_credentials"}, "scope": {"read"}}
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			b.Fatal(err)
		}
		proofs := make([]string, b.N)
		for i := range proofs {
			if proofs[i], err = dpop.Sign(key, dpop.Claims{Method: "POST", URL: h.Issuer + "/token", IssuedAt: h.Clock.Now()}); err != nil {
				b.Fatal(err)
			}
		}
		var next atomic.Int64
		run(b, h, func() func(serveFunc) bool {
			return func(serve serveFunc) bool {
				r := tokenRequest(form, stack.Service, stack.ServiceSecret)
				r.Header.Set("DPoP", proofs[next.Add(1)-1])
				w := serve(r)
				return w.Code == http.StatusOK && strings.Contains(w.Body.String(), `"token_type":"DPoP"`)
			}
		})
	})
}

func BenchmarkAuthorizationCode(b *testing.B) {
	backends(b, func(b *testing.B, h *stack.Stack) {
		ctx := context.Background()
		pk := stack.NewPKCE()
		now := h.Clock.Now()
		person := benchPerson(b, h)
		// Codes are made before the timer starts; each iteration redeems one.
		codes := make([]string, b.N)
		for i := range codes {
			codes[i] = secret.New(secret.PrefixCode)
			if err := h.Store().CreateAuthCode(ctx, store.AuthCode{
				Hash: secret.Hash(codes[i]), Project: stack.ProjectKey, ClientID: "web", Subject: person,
				RedirectURI: "https://app.example/cb", Scopes: []string{"read"}, CodeChallenge: pk.Challenge,
				CodeChallengeMethod: "S256", AuthTime: now, ExpiresAt: now.Add(time.Hour), CreatedAt: now,
			}); err != nil {
				b.Fatal(err)
			}
		}
		var next atomic.Int64
		run(b, h, func() func(serveFunc) bool {
			return func(serve serveFunc) bool {
				code := codes[next.Add(1)-1]
				return serve(tokenRequest(url.Values{"grant_type": {"authorization_code"}, "code": {code},
					"redirect_uri": {"https://app.example/cb"}, "code_verifier": {pk.Verifier}}, stack.Web, stack.WebSecret)).Code == http.StatusOK
			}
		})
	})
}

func BenchmarkRefresh(b *testing.B) {
	backends(b, func(b *testing.B, h *stack.Stack) {
		now := h.Clock.Now()
		person := benchPerson(b, h)
		// One chain per goroutine: each refresh presents the token the previous one returned.
		run(b, h, func() func(serveFunc) bool {
			rt := secret.New(secret.PrefixRefreshToken)
			fam := secret.New("")
			if err := h.Store().CreateTokens(context.Background(), store.Token{
				Hash: secret.Hash(rt), Kind: store.RefreshToken, Project: stack.ProjectKey, ClientID: "web",
				Subject: person, Scopes: []string{"read"}, FamilyID: fam, AuthTime: now, IssuedAt: now,
				ExpiresAt: now.Add(24 * time.Hour),
			}); err != nil {
				b.Fatal(err)
			}
			return func(serve serveFunc) bool {
				w := serve(tokenRequest(url.Values{"grant_type": {"refresh_token"}, "refresh_token": {rt}}, stack.Web, stack.WebSecret))
				var resp struct {
					RefreshToken string `json:"refresh_token"`
				}
				if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &resp) != nil || resp.RefreshToken == "" {
					return false
				}
				rt = resp.RefreshToken
				return true
			}
		})
	})
}
