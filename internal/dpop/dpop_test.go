package dpop_test

import (
	"encoding/json"
	"errors"
	"os"
	"slices"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/dpop"
	mcpdpop "latchkey.dev/latchkey/mcp/dpop"
)

// vectorsFile is the mcp module's test vectors, made and run there too: both verifiers must
// answer every vector alike (docs/decisions/0071-one-jose-stack.md).
const vectorsFile = "../../mcp/dpop/testdata/vectors.json"

type vector struct {
	Name        string `json:"name"`
	Proof       string `json:"proof"`
	Method      string `json:"method"`
	URL         string `json:"url"`
	AccessToken string `json:"access_token"`
	Valid       bool   `json:"valid"`
	JKT         string `json:"jkt"`
	JTI         string `json:"jti"`
	Nonce       string `json:"nonce"`
	Alg         string `json:"alg"`
}

func loadVectors(t testing.TB) (time.Time, []vector) {
	t.Helper()
	raw, err := os.ReadFile(vectorsFile)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Now     int64    `json:"now"`
		Vectors []vector `json:"vectors"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Vectors) < 40 {
		t.Fatalf("only %d vectors", len(f.Vectors))
	}
	return time.Unix(f.Now, 0), f.Vectors
}

func TestVectors(t *testing.T) {
	now, vs := loadVectors(t)
	for _, v := range vs {
		t.Run(v.Name, func(t *testing.T) {
			p, err := dpop.Verify(v.Proof, dpop.Check{Method: v.Method, URL: v.URL, Now: now, AccessToken: v.AccessToken})
			if !v.Valid {
				if !errors.Is(err, dpop.ErrInvalidProof) {
					t.Fatalf("accepted (%+v, %v), want ErrInvalidProof", p, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			if p.JKT != v.JKT || p.JTI != v.JTI || p.Nonce != v.Nonce || p.Algorithm != v.Alg || !p.ReplayUntil.Equal(p.IssuedAt.Add(dpop.DefaultWindow)) {
				t.Errorf("proof = %+v, want jkt %s jti %s nonce %q alg %s", p, v.JKT, v.JTI, v.Nonce, v.Alg)
			}
		})
	}
}

// TestSameAsTheMCPModule: what the server advertises and accepts is what MCP servers accept.
func TestSameAsTheMCPModule(t *testing.T) {
	if !slices.Equal(dpop.Algorithms, mcpdpop.Algorithms) {
		t.Errorf("Algorithms = %v, the mcp module's %v", dpop.Algorithms, mcpdpop.Algorithms)
	}
	for name, pair := range map[string][2]int{
		"MaxProofLength": {dpop.MaxProofLength, mcpdpop.MaxProofLength},
		"MaxJTILength":   {dpop.MaxJTILength, mcpdpop.MaxJTILength},
		"MinRSABits":     {dpop.MinRSABits, mcpdpop.MinRSABits},
		"MaxRSABits":     {dpop.MaxRSABits, mcpdpop.MaxRSABits},
	} {
		if pair[0] != pair[1] {
			t.Errorf("%s = %d, the mcp module's %d", name, pair[0], pair[1])
		}
	}
	if dpop.DefaultWindow != mcpdpop.DefaultWindow {
		t.Errorf("DefaultWindow = %v, the mcp module's %v", dpop.DefaultWindow, mcpdpop.DefaultWindow)
	}
}

// FuzzSameAnswer mutates the vectors' proofs and requires both verifiers to accept or refuse
// each alike, with the same thumbprint. The vectors are its seeds, so go test runs them.
func FuzzSameAnswer(f *testing.F) {
	now, vs := loadVectors(f)
	for _, v := range vs {
		f.Add(v.Proof, v.Method, v.URL, v.AccessToken)
	}
	f.Fuzz(func(t *testing.T, proof, method, u, token string) {
		a, errA := dpop.Verify(proof, dpop.Check{Method: method, URL: u, Now: now, AccessToken: token})
		b, errB := mcpdpop.Verify(proof, mcpdpop.Check{Method: method, URL: u, Now: now, AccessToken: token})
		if (errA == nil) != (errB == nil) {
			t.Fatalf("server: %v; mcp module: %v", errA, errB)
		}
		if errA == nil && (a.JKT != b.JKT || a.JTI != b.JTI || a.Nonce != b.Nonce || !a.IssuedAt.Equal(b.IssuedAt)) {
			t.Fatalf("server: %+v; mcp module: %+v", a, b)
		}
	})
}

func TestSameURI(t *testing.T) {
	for _, c := range []struct {
		htu, req string
		want     bool
	}{
		{"https://as.example/t", "https://as.example/t", true},
		{"HTTPS://AS.EXAMPLE/t", "https://as.example/t?x=1#f", true},
		{"https://as.example:443/t", "https://as.example/t", true},
		{"http://as.example:80/t", "http://as.example/t", true},
		{"https://as.example", "https://as.example/", true},
		{"https://[::1]:8443/t", "https://[::1]:8443/t", true},
		{"https://as.example/T", "https://as.example/t", false},
		{"https://as.example:80/t", "https://as.example/t", false},
		{"http://as.example/t", "https://as.example/t", false},
		{"ftp://as.example/t", "ftp://as.example/t", false},
		{"https://u:p@as.example/t", "https://as.example/t", false},
		{"/t", "/t", false},
	} {
		if got := dpop.SameURI(c.htu, c.req); got != c.want {
			t.Errorf("SameURI(%q, %q) = %v, want %v", c.htu, c.req, got, c.want)
		}
	}
}

// Problem is what the client reads in error_description: it names what to fix.
func TestProblem(t *testing.T) {
	now, vs := loadVectors(t)
	want := map[string]string{
		"typ JWT":                             "typ must be dpop+jwt",
		"alg none, no signature":              `alg "none" is not accepted`,
		"alg HS256 keyed with the public jwk": `alg "HS256" is not accepted`,
		"jwk with the EC private key":         "jwk holds private key material",
		"jwk RSA-1024":                        "RSA key size is not accepted",
		"crit b64 false":                      "crit is not supported",
		"signature with a bit flipped":        "the signature does not verify",
		"htu of another endpoint":             "htu does not match the request URL",
		"iat too old":                         "iat is outside the accepted window",
		"ath of another token":                "ath does not match the access token",
		"two parts":                           "the proof is not a compact JWS",
	}
	for _, v := range vs {
		w, ok := want[v.Name]
		if !ok {
			continue
		}
		delete(want, v.Name)
		_, err := dpop.Verify(v.Proof, dpop.Check{Method: v.Method, URL: v.URL, Now: now, AccessToken: v.AccessToken})
		if err == nil || dpop.Problem(err) != w {
			t.Errorf("%s: %v, want %q", v.Name, err, w)
		}
	}
	if len(want) > 0 {
		t.Errorf("no vectors %v", want)
	}
}

// BenchmarkVerify is the cost of checking one proof, by algorithm, without any store; the mcp
// module's BenchmarkVerify measures its verifier the same way.
func BenchmarkVerify(b *testing.B) {
	now, vs := loadVectors(b)
	for _, name := range []string{"ES256", "EdDSA", "PS256"} {
		i := slices.IndexFunc(vs, func(v vector) bool { return v.Name == name })
		if i < 0 {
			b.Fatalf("no vector %s", name)
		}
		v := vs[i]
		b.Run(name, func(b *testing.B) {
			check := dpop.Check{Method: v.Method, URL: v.URL, Now: now}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := dpop.Verify(v.Proof, check); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
