package webhook_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"latchkey.dev/latchkey/test/stack"
	"latchkey.dev/latchkey/webhook/idjag"
)

// BenchmarkJWTBearer redeems ID-JAGs (ES256, inline keys, a new jti each) at team/tools, to
// be read beside BenchmarkClientCredentials: the difference is the assertion's parse and
// signature check, the jti insert and the person lookup.
//
//	go test ./webhook -run '^$' -bench 'JWTBearer|ClientCredentials|IDJAGVerify' -benchtime 3s
func BenchmarkJWTBearer(b *testing.B) {
	backends(b, func(b *testing.B, h *stack.Stack) {
		s := stack.NewIDJAG(b, h)
		assertions := make([]string, b.N+benchConcurrency)
		for i := range assertions {
			assertions[i] = s.Assertion(nil)
		}
		var next atomic.Int64
		run(b, h, func() func(serveFunc) bool {
			return func(serve serveFunc) bool {
				a := assertions[next.Add(1)-1]
				r := httptest.NewRequest(http.MethodPost, "http://bench/team/tools/token",
					strings.NewReader(url.Values{"grant_type": {idjag.GrantJWTBearer}, "assertion": {a}}.Encode()))
				r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				r.SetBasicAuth("agent", stack.ToolsSecret)
				return serve(r).Code == http.StatusOK
			}
		})
	})
}

// BenchmarkIDJAGVerify is the signature check alone: parse and ES256-verify one ID-JAG.
func BenchmarkIDJAGVerify(b *testing.B) {
	s := stack.NewIDJAG(b, stack.New(b, stack.Options{}))
	a := s.Assertion(nil)
	key := &s.IDPKey.PublicKey
	b.ReportAllocs()
	for b.Loop() {
		tok, err := jwt.ParseSigned(a, []jose.SignatureAlgorithm{jose.ES256})
		if err != nil {
			b.Fatal(err)
		}
		var c map[string]any
		if err := tok.Claims(key, &c); err != nil {
			b.Fatal(err)
		}
	}
}
