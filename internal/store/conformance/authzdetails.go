package conformance

import (
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

// approvedDetails is what internal/authzdetails.Marshal writes for an approved GitHub repository.
const approvedDetails = `[{"type":"github_repository","locations":["https://api.github.com/repos/acme/api"],"actions":["read"]}]`

// testCodeAuthorizationDetails: the details a person approved come back with the code exactly
// once, to the redemption's check and to the redemption, byte for byte.
func testCodeAuthorizationDetails(t *testing.T, s store.Store) {
	ctx := t.Context()
	c, plain := newCode("rar"), newCode("rar-plain")
	c.AuthorizationDetails = approvedDetails
	must(t, s.CreateAuthCode(ctx, c))
	must(t, s.CreateAuthCode(ctx, plain))
	var seen string
	got, err := s.RedeemAuthCode(ctx, c.Hash, at(time.Second), func(a store.AuthCode) error { seen = a.AuthorizationDetails; return nil })
	must(t, err)
	equal(t, "details seen by check", seen, approvedDetails)
	equal(t, "redeemed code", got, c)
	got, err = s.RedeemAuthCode(ctx, plain.Hash, at(time.Second), nil)
	must(t, err)
	equal(t, "code without details", got.AuthorizationDetails, "")
}

// testTokenAuthorizationDetails: a token keeps its details through every way it is read
// (GetToken, TokenHolder, SubjectAccess for token exchange), and a rotation stores what the
// caller puts on the successor, on both of PostgreSQL's rotation paths (the one-statement
// path with and without a code hash) and SQLite's transaction.
func testTokenAuthorizationDetails(t *testing.T, s store.Store) {
	ctx := t.Context()
	at0, rt0 := pair("rar", "c1", "alice", "rar", 0, base)
	at0.AuthorizationDetails, rt0.AuthorizationDetails = approvedDetails, approvedDetails
	must(t, s.CreateTokens(ctx, at0, rt0))
	equal(t, "access token", getToken(t, s, "rar/at"), at0)
	tok, _, _, err := s.TokenHolder(ctx, at0.Hash)
	must(t, err)
	equal(t, "TokenHolder's details", tok.AuthorizationDetails, approvedDetails)
	tok, _, err = s.SubjectAccess(ctx, at0.Hash, "github")
	must(t, err)
	equal(t, "SubjectAccess's details", tok.AuthorizationDetails, approvedDetails)

	for i, code := range [][]byte{rt0.CodeHash, nil} {
		old := rt0
		if i == 1 {
			plainAT, plainRT := pair("rar-nocode", "c1", "alice", "rar-nocode", 0, base)
			plainAT.CodeHash, plainRT.CodeHash = nil, nil
			plainRT.AuthorizationDetails = approvedDetails
			must(t, s.CreateTokens(ctx, plainAT, plainRT))
			old = plainRT
		}
		nextAT, nextRT := pair(id("rar-next", i), "c1", "alice", old.FamilyID, 1, at(time.Minute))
		nextAT.CodeHash, nextRT.CodeHash = code, code
		nextAT.AuthorizationDetails, nextRT.AuthorizationDetails = approvedDetails, approvedDetails
		rot, err := s.RotateRefreshToken(ctx, store.RotateRequest{OldHash: old.Hash, New: []store.Token{nextAT, nextRT}, Now: at(time.Minute)})
		must(t, err)
		equal(t, "outcome", rot.Outcome, store.OutcomeRotated)
		equal(t, "old token's details", rot.Old.AuthorizationDetails, approvedDetails)
		equal(t, "successor's details", getToken(t, s, id("rar-next", i)+"/rt").AuthorizationDetails, approvedDetails)
	}
}
