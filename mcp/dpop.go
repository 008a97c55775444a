package mcp

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"latchkey.dev/latchkey/mcp/dpop"
)

// TokenInfoJKT holds, in auth.TokenInfo.Extra, the thumbprint of the key a DPoP-bound token is
// bound to (its cnf.jkt); absent for a bearer token.
const TokenInfoJKT = "latchkey.dev/cnf_jkt"

// UseOnce records a one-time key until the given time and reports whether it was new. A
// ResourceServer run as several replicas sets ResourceServer.UseOnce to a store they share (a
// Redis SET NX with an expiry, a SQL table with a primary key) so a proof replayed at another
// replica is refused too.
type UseOnce func(ctx context.Context, key string, until time.Time) (fresh bool, err error)

// maxReplayEntries bounds the in-memory replay cache. A proof lives DefaultWindow either side
// of now; more proofs than this inside two minutes and the oldest entries go first, which only
// weakens replay protection for proofs that old.
const maxReplayEntries = 1 << 16

// memoryReplays is the default UseOnce: one process's memory.
type memoryReplays struct {
	mu   sync.Mutex
	seen map[string]time.Time
	now  func() time.Time
}

func (m *memoryReplays) use(_ context.Context, key string, until time.Time) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if exp, ok := m.seen[key]; ok && now.Before(exp) {
		return false, nil
	}
	if len(m.seen) >= maxReplayEntries {
		for k, exp := range m.seen {
			if !now.Before(exp) {
				delete(m.seen, k)
			}
		}
		for k := range m.seen {
			if len(m.seen) < maxReplayEntries {
				break
			}
			delete(m.seen, k)
		}
	}
	m.seen[key] = until
	return true, nil
}

func (rs *ResourceServer) useOnce() UseOnce {
	rs.replayOnce.Do(func() {
		rs.replays = rs.UseOnce
		if rs.replays == nil {
			m := &memoryReplays{seen: map[string]time.Time{}, now: rs.now}
			rs.replays = m.use
		}
	})
	return rs.replays
}

// authScheme splits an Authorization header into its scheme (lower case) and credentials.
func authScheme(r *http.Request) (scheme, cred string) {
	fields := strings.Fields(r.Header.Get("Authorization"))
	if len(fields) != 2 {
		return "", ""
	}
	return strings.ToLower(fields[0]), fields[1]
}

// htu is the URL a proof for r must name: the request's path at the origin of Resource, which
// is where clients address this server (a proxy in front may rewrite the host, never what
// the client signed).
func (rs *ResourceServer) htu(r *http.Request) string {
	u, err := url.Parse(rs.Resource)
	if err != nil {
		return ""
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: r.URL.Path, RawPath: r.URL.RawPath}).String()
}

// errDPoP is a refusal of a DPoP request: code is invalid_token or invalid_dpop_proof.
type errDPoP struct {
	code, desc string
}

func (e *errDPoP) Error() string { return e.desc }

// checkProof checks a request that presents token with "Authorization: DPoP" (RFC 9449 §7):
// the token must be bound to a key (jkt, its cnf.jkt), and the request must carry one proof for
// this method and URL, signed with that key, whose ath is the token's hash, within the iat
// window and not seen before.
func (rs *ResourceServer) checkProof(r *http.Request, token, jkt string) error {
	if jkt == "" {
		return &errDPoP{"invalid_token", "the access token is not bound to a key; present it as a Bearer token"}
	}
	proofs := r.Header.Values("DPoP")
	if len(proofs) != 1 {
		return &errDPoP{"invalid_dpop_proof", "send exactly one DPoP proof"}
	}
	now := rs.now()
	proof, err := dpop.Verify(proofs[0], dpop.Check{Method: r.Method, URL: rs.htu(r), Now: now, AccessToken: token})
	if err != nil {
		return &errDPoP{"invalid_dpop_proof", strings.TrimPrefix(err.Error(), dpop.ErrInvalidProof.Error()+": ")}
	}
	if proof.JKT != jkt {
		return &errDPoP{"invalid_token", "the DPoP proof is not signed with the key the access token is bound to"}
	}
	sum := sha256.Sum256([]byte(proof.JKT + "\x00" + proof.JTI))
	fresh, err := rs.useOnce()(r.Context(), string(sum[:]), proof.ReplayUntil)
	if err != nil {
		return fmt.Errorf("recording the DPoP proof: %w", err)
	}
	if !fresh {
		return &errDPoP{"invalid_dpop_proof", "this DPoP proof was already used; make a new one for every request"}
	}
	return nil
}

// dpopChallenge is RFC 9449 §7.1's challenge; err nil gives the bare one (which algorithms).
func dpopChallenge(metadataURL string, err *errDPoP) string {
	var b strings.Builder
	b.WriteString("DPoP ")
	if metadataURL != "" {
		fmt.Fprintf(&b, "resource_metadata=%q, ", metadataURL)
	}
	if err != nil {
		fmt.Fprintf(&b, `error="%s", error_description="%s", `, err.code, quotable(err.desc))
	}
	fmt.Fprintf(&b, `algs="%s"`, strings.Join(dpop.Algorithms, " "))
	return b.String()
}

// quotable drops what could break a quoted-string.
func quotable(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '"' || r == '\\' || r < 0x20 || r > 0x7e {
			return -1
		}
		return r
	}, s)
}
