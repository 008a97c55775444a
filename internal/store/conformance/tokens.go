package conformance

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

const (
	accessLife  = time.Hour
	refreshLife = 24 * time.Hour
	grace       = 10 * time.Second
)

// pair returns an access and a refresh token of family, generation gen, issued at issued;
// their hashes are hash(name+"/at") and hash(name+"/rt").
func pair(name, client, subject, family string, gen int, issued time.Time) (store.Token, store.Token) {
	a := store.Token{
		Hash: hash(name + "/at"), Kind: store.AccessToken, Project: project, ClientID: client, Subject: subject,
		Scopes: []string{"read"}, Audience: []string{"https://mcp.example/"}, FamilyID: family, Generation: gen,
		AuthTime: base, IssuedAt: issued, ExpiresAt: issued.Add(accessLife),
	}
	if family != "" {
		a.CodeHash = hash("code-" + family)
	}
	r := a
	r.Hash, r.Kind, r.ExpiresAt = hash(name+"/rt"), store.RefreshToken, issued.Add(refreshLife)
	return a, r
}

// issue stores a new family named name (tokens name/at and name/rt) issued at base.
func issue(t testing.TB, s store.Store, name, client, subject string) (store.Token, store.Token) {
	t.Helper()
	a, r := pair(name, client, subject, name, 0, base)
	must(t, s.CreateTokens(t.Context(), a, r))
	return a, r
}

func getToken(t testing.TB, s store.Store, name string) store.Token {
	t.Helper()
	tok, err := s.GetToken(t.Context(), hash(name))
	must(t, err)
	return tok
}

func testTokenRoundTrip(t *testing.T, s store.Store) {
	ctx := t.Context()
	access, refresh := issue(t, s, "f1", "c1", "alice")
	equal(t, "access", getToken(t, s, "f1/at"), access)
	equal(t, "refresh", getToken(t, s, "f1/rt"), refresh)

	// client_credentials: no subject, no code, no audience.
	cc := store.Token{Hash: hash("cc"), Kind: store.AccessToken, Project: project, ClientID: "svc",
		FamilyID: "fcc", IssuedAt: base, ExpiresAt: access.ExpiresAt}
	must(t, s.CreateTokens(ctx, cc))
	equal(t, "client_credentials token", getToken(t, s, "cc"), cc)

	// Revoked tokens are still returned; callers check Active.
	must(t, s.RevokeToken(ctx, hash("cc"), base))
	if got := getToken(t, s, "cc"); got.Active(base) || got.RevokedAt == nil {
		t.Fatalf("revoked token reads as %+v", got)
	}
	_, err := s.GetToken(ctx, hash("nope"))
	wantErr(t, err, store.ErrNotFound)
}

func testTokenBatchAtomic(t *testing.T, s store.Store) {
	ctx := t.Context()
	issue(t, s, "f1", "c1", "alice")
	fresh, _ := pair("f2", "c1", "alice", "f2", 0, base)
	_, dup := pair("f1", "c1", "alice", "f2", 0, base) // same hash as f1/rt
	wantErr(t, s.CreateTokens(ctx, fresh, dup), store.ErrConflict)
	_, err := s.GetToken(ctx, hash("f2/at"))
	wantErr(t, err, store.ErrNotFound)
}

func testTokenRevoke(t *testing.T, s store.Store) {
	ctx := t.Context()
	now := at(time.Minute)
	issue(t, s, "f1", "c1", "alice")
	issue(t, s, "f2", "c1", "alice")

	// An access token alone.
	must(t, s.RevokeToken(ctx, hash("f1/at"), now))
	if getToken(t, s, "f1/at").Active(now) || !getToken(t, s, "f1/rt").Active(now) {
		t.Fatal("revoking an access token must end it and only it")
	}
	// A refresh token ends its family, not others.
	must(t, s.RevokeToken(ctx, hash("f2/rt"), now))
	if getToken(t, s, "f2/at").Active(now) || getToken(t, s, "f2/rt").Active(now) {
		t.Fatal("revoking a refresh token must end its family")
	}
	if !getToken(t, s, "f1/rt").Active(now) {
		t.Fatal("revoking one family ended another")
	}
	// Revoking again keeps the first revocation time.
	must(t, s.RevokeToken(ctx, hash("f2/rt"), at(time.Hour)))
	equal(t, "revoked at", getToken(t, s, "f2/rt").RevokedAt, tp(now))

	wantErr(t, s.RevokeToken(ctx, hash("nope"), now), store.ErrNotFound)
}

func testTokenRevokeFamily(t *testing.T, s store.Store) {
	ctx := t.Context()
	issue(t, s, "f1", "c1", "alice")
	// An expired and an already revoked token of the same family do not count as live.
	old, _ := pair("f1-old", "c1", "alice", "f1", 0, at(-2*time.Hour))
	gone, _ := pair("f1-gone", "c1", "alice", "f1", 0, base)
	gone.RevokedAt = tp(base)
	must(t, s.CreateTokens(ctx, old, gone))
	issue(t, s, "f2", "c1", "alice")

	n, err := s.RevokeFamily(ctx, "f1", at(time.Minute))
	must(t, err)
	equal(t, "live tokens revoked", n, int64(2))
	n, err = s.RevokeFamily(ctx, "f1", at(time.Minute))
	must(t, err)
	equal(t, "second revocation", n, int64(0))
	live, err := s.CountLiveTokens(ctx, project, at(time.Minute))
	must(t, err)
	equal(t, "live", live, map[string]int64{"c1": 2})
}

func testTokenRevokeByCode(t *testing.T, s store.Store) {
	ctx := t.Context()
	issue(t, s, "f1", "c1", "alice")
	issue(t, s, "f2", "c1", "alice")
	// A later generation whose caller did not repeat the code hash still belongs to the family.
	at1, rt1 := pair("f1-g1", "c1", "alice", "f1", 1, at(time.Minute))
	at1.CodeHash, rt1.CodeHash = nil, nil
	must(t, s.CreateTokens(ctx, at1, rt1))

	n, err := s.RevokeByCode(ctx, hash("code-f1"), at(2*time.Minute))
	must(t, err)
	equal(t, "revoked", n, int64(4))
	if !getToken(t, s, "f2/at").Active(at(2 * time.Minute)) {
		t.Fatal("a family from another code was revoked")
	}
	n, err = s.RevokeByCode(ctx, hash("unknown code"), at(2*time.Minute))
	must(t, err)
	equal(t, "unknown code", n, int64(0))
}

func testTokenRevokeClientTokens(t *testing.T, s store.Store) {
	ctx := t.Context()
	issue(t, s, "f1", "c1", "alice")
	issue(t, s, "f2", "c1", "bob")
	issue(t, s, "f3", "c2", "alice")
	issue(t, s, "f4", "c3", "alice")
	otherProject := store.Token{Hash: hash("elsewhere"), Kind: store.AccessToken, Project: "team-b/main",
		ClientID: "c1", Subject: "alice", FamilyID: "fx", IssuedAt: base, ExpiresAt: at(time.Hour)}
	must(t, s.CreateTokens(ctx, otherProject))

	got, err := s.RevokeClientTokens(ctx, project, []string{"c1", "c2", "c9"}, at(time.Minute))
	must(t, err)
	equal(t, "revoked per client", got, map[string]int64{"c1": 4, "c2": 2, "c9": 0})
	live, err := s.CountLiveTokens(ctx, project, at(time.Minute))
	must(t, err)
	equal(t, "live", live, map[string]int64{"c3": 2})
	if !getToken(t, s, "elsewhere").Active(at(time.Minute)) {
		t.Fatal("a token of another project was revoked")
	}
}

// testTokenRevokeClientTokensIn: one client's tokens end in every project named and only
// there; the same client id in a project not named, and other clients, keep theirs.
func testTokenRevokeClientTokensIn(t *testing.T, s store.Store) {
	ctx := t.Context()
	issue(t, s, "f1", "c1", "alice")
	issue(t, s, "f2", "c2", "alice")
	for _, tok := range []store.Token{
		{Hash: hash("b-c1"), Kind: store.AccessToken, Project: "team-b/main", ClientID: "c1", Subject: "alice", FamilyID: "fb", IssuedAt: base, ExpiresAt: at(time.Hour)},
		{Hash: hash("c-c1"), Kind: store.AccessToken, Project: "team-c/main", ClientID: "c1", Subject: "alice", FamilyID: "fc", IssuedAt: base, ExpiresAt: at(time.Hour)},
	} {
		must(t, s.CreateTokens(ctx, tok))
	}

	got, err := s.RevokeClientTokensIn(ctx, []string{project, "team-b/main", "team-empty/main"}, "c1", at(time.Minute))
	must(t, err)
	equal(t, "revoked per project", got, map[string]int64{project: 2, "team-b/main": 1, "team-empty/main": 0})
	live, err := s.CountLiveTokens(ctx, project, at(time.Minute))
	must(t, err)
	equal(t, "live in the project", live, map[string]int64{"c2": 2})
	if getToken(t, s, "b-c1").Active(at(time.Minute)) {
		t.Error("c1's token in team-b/main is still active")
	}
	if !getToken(t, s, "c-c1").Active(at(time.Minute)) {
		t.Error("c1's token in a project not named was revoked")
	}
}

func testTokenCountLive(t *testing.T, s store.Store) {
	ctx := t.Context()
	issue(t, s, "f1", "c1", "alice") // access expires at base+1h
	issue(t, s, "f2", "c2", "alice")
	must(t, s.RevokeToken(ctx, hash("f2/at"), base))
	// Rotation retires the old refresh token.
	at1, rt1 := pair("f1-g1", "", "", "", 0, at(time.Minute))
	_, err := s.RotateRefreshToken(ctx, store.RotateRequest{OldHash: hash("f1/rt"), New: []store.Token{at1, rt1},
		Sealed: []byte("sealed"), Now: at(time.Minute), Grace: grace})
	must(t, err)

	live, err := s.CountLiveTokens(ctx, project, at(time.Minute))
	must(t, err)
	equal(t, "live before f1/at expires", live, map[string]int64{"c1": 3, "c2": 1})
	live, err = s.CountLiveTokens(ctx, project, at(time.Hour))
	must(t, err)
	equal(t, "live after f1/at expires", live, map[string]int64{"c1": 2, "c2": 1})
	live, err = s.CountLiveTokens(ctx, "team-b/main", base)
	must(t, err)
	equal(t, "other project", len(live), 0)
}

// ---------------------------------------------------------------------------------------------
// Rotation and reuse detection

// rotate presents name's refresh token at now, offering successors named next.
func rotate(t testing.TB, s store.Store, old, next string, now time.Time, g time.Duration) (store.Rotation, error) {
	t.Helper()
	a, r := pair(next, "", "", "", 0, now)
	return s.RotateRefreshToken(t.Context(), store.RotateRequest{OldHash: hash(old + "/rt"),
		New: []store.Token{a, r}, Sealed: []byte("response of " + next), Now: now, Grace: g})
}

func testRotateRotated(t *testing.T, s store.Store) {
	_, rt := issue(t, s, "f1", "c1", "alice")
	now := at(time.Minute)
	r, err := rotate(t, s, "f1", "g1", now, grace)
	must(t, err)
	equal(t, "outcome", r.Outcome, store.OutcomeRotated)
	want := rt
	want.RotatedAt = tp(now)
	equal(t, "old", r.Old, want)
	equal(t, "old as stored", getToken(t, s, "f1/rt"), want)

	// The successors join the family one generation on, inheriting holder and code.
	wantAT, wantRT := pair("g1", "c1", "alice", "f1", 1, now)
	equal(t, "new access token", getToken(t, s, "g1/at"), wantAT)
	equal(t, "new refresh token", getToken(t, s, "g1/rt"), wantRT)

	// And the successor rotates in turn.
	r, err = rotate(t, s, "g1", "g2", at(2*time.Minute), grace)
	must(t, err)
	equal(t, "second rotation", r.Outcome, store.OutcomeRotated)
	equal(t, "generation", getToken(t, s, "g2/rt").Generation, 2)
}

func testRotateGraceReplay(t *testing.T, s store.Store) {
	ctx := t.Context()
	issue(t, s, "f1", "c1", "alice")
	_, err := rotate(t, s, "f1", "g1", at(time.Minute), grace)
	must(t, err)

	r, err := rotate(t, s, "f1", "retry", at(time.Minute+grace-time.Nanosecond), grace)
	must(t, err)
	equal(t, "outcome", r.Outcome, store.OutcomeGraceReplay)
	equal(t, "replay", string(r.Replay), "response of g1")
	equal(t, "old", r.Old.Hash, hash("f1/rt"))
	_, err = s.GetToken(ctx, hash("retry/rt"))
	wantErr(t, err, store.ErrNotFound)
	if !getToken(t, s, "g1/rt").Active(at(time.Minute + grace)) {
		t.Fatal("a grace replay must leave the successor live")
	}
}

func testRotateReuseAfterGrace(t *testing.T, s store.Store) {
	ctx := t.Context()
	issue(t, s, "f1", "c1", "alice")
	issue(t, s, "f2", "c1", "alice") // another family of the same client and person
	issue(t, s, "f3", "c2", "alice") // another client, same person
	issue(t, s, "f4", "c1", "bob")   // same client, another person
	_, err := rotate(t, s, "f1", "g1", at(time.Minute), grace)
	must(t, err)

	now := at(time.Minute + grace)
	r, err := rotate(t, s, "f1", "thief", now, grace)
	must(t, err)
	equal(t, "outcome", r.Outcome, store.OutcomeReuseDetected)
	// f1/at, g1/at, g1/rt, f2/at, f2/rt; f1/rt was already retired.
	equal(t, "revoked", r.Revoked, int64(5))
	_, err = s.GetToken(ctx, hash("thief/rt"))
	wantErr(t, err, store.ErrNotFound)
	for _, name := range []string{"f1/at", "f1/rt", "g1/at", "g1/rt", "f2/at", "f2/rt"} {
		if getToken(t, s, name).Active(now) {
			t.Errorf("%s still active after reuse", name)
		}
	}
	for _, name := range []string{"f3/at", "f3/rt", "f4/at", "f4/rt"} {
		if !getToken(t, s, name).Active(now) {
			t.Errorf("%s (another client or person) was revoked", name)
		}
	}
	// The retired token is now plainly inactive.
	r, err = rotate(t, s, "f1", "again", now, grace)
	must(t, err)
	equal(t, "after reuse", r.Outcome, store.OutcomeInactive)
}

func testRotateReuseTwoGenerationsOld(t *testing.T, s store.Store) {
	issue(t, s, "f1", "c1", "alice")
	issue(t, s, "f3", "c2", "alice")
	_, err := rotate(t, s, "f1", "g1", at(time.Second), grace)
	must(t, err)
	_, err = rotate(t, s, "g1", "g2", at(2*time.Second), grace)
	must(t, err)

	// f1 was retired 2s ago (inside grace), but its successor g1 is no longer the head.
	now := at(3 * time.Second)
	r, err := rotate(t, s, "f1", "thief", now, grace)
	must(t, err)
	equal(t, "outcome", r.Outcome, store.OutcomeReuseDetected)
	equal(t, "revoked", r.Revoked, int64(4)) // f1/at, g1/at, g2/at, g2/rt
	for _, name := range []string{"g2/at", "g2/rt"} {
		if getToken(t, s, name).Active(now) {
			t.Errorf("%s still active", name)
		}
	}
	live, err := s.CountLiveTokens(t.Context(), project, now)
	must(t, err)
	equal(t, "live", live, map[string]int64{"c2": 2})
}

func testRotateReuseWithoutGrace(t *testing.T, s store.Store) {
	issue(t, s, "f1", "c1", "alice")
	_, err := rotate(t, s, "f1", "g1", at(time.Minute), 0)
	must(t, err)
	r, err := rotate(t, s, "f1", "retry", at(time.Minute), 0)
	must(t, err)
	equal(t, "outcome", r.Outcome, store.OutcomeReuseDetected)
	if getToken(t, s, "g1/rt").Active(at(time.Minute)) {
		t.Fatal("successor still active")
	}
}

func testRotateInactive(t *testing.T, s store.Store) {
	ctx := t.Context()
	_, rt := issue(t, s, "f1", "c1", "alice")
	r, err := rotate(t, s, "f1", "g1", rt.ExpiresAt, grace)
	must(t, err)
	equal(t, "expired", r.Outcome, store.OutcomeInactive)
	equal(t, "old", r.Old, rt)

	issue(t, s, "f2", "c1", "alice")
	must(t, s.RevokeToken(ctx, hash("f2/rt"), base))
	r, err = rotate(t, s, "f2", "g2", at(time.Minute), grace)
	must(t, err)
	equal(t, "revoked", r.Outcome, store.OutcomeInactive)
	for _, name := range []string{"g1/rt", "g2/rt"} {
		_, err := s.GetToken(ctx, hash(name))
		wantErr(t, err, store.ErrNotFound)
	}
}

func testRotateNotFound(t *testing.T, s store.Store) {
	_, err := rotate(t, s, "nope", "g1", base, grace)
	wantErr(t, err, store.ErrNotFound)
	// An access token is not a refresh token.
	issue(t, s, "f1", "c1", "alice")
	_, err = s.RotateRefreshToken(t.Context(), store.RotateRequest{OldHash: hash("f1/at"), Now: base, Grace: grace})
	wantErr(t, err, store.ErrNotFound)
}

func testRotateSuccessorInFamily(t *testing.T, s store.Store) {
	ctx := t.Context()
	issue(t, s, "f1", "c1", "alice")
	at1, rt1 := pair("g1", "c1", "alice", "another-family", 0, at(time.Minute))
	_, err := s.RotateRefreshToken(ctx, store.RotateRequest{OldHash: hash("f1/rt"), New: []store.Token{at1, rt1},
		Now: at(time.Minute), Grace: grace})
	if err == nil {
		t.Fatal("a successor outside the family was accepted")
	}
	if getToken(t, s, "f1/rt").RotatedAt != nil {
		t.Fatal("the old token was retired although the rotation failed")
	}
	_, err = s.GetToken(ctx, hash("g1/rt"))
	wantErr(t, err, store.ErrNotFound)
}

func testRotateConcurrentGrace(t *testing.T, s store.Store) {
	issue(t, s, "f1", "c1", "alice")
	const n = 50
	now := at(time.Minute)
	results := make([]store.Rotation, n)
	errs := make([]error, n)
	parallel(n, func(i int) {
		results[i], errs[i] = rotate(t, s, "f1", id("g", i), now, grace)
	})
	winner := -1
	for i, r := range results {
		must(t, errs[i])
		if r.Outcome == store.OutcomeRotated {
			if winner >= 0 {
				t.Fatalf("two rotations succeeded: %d and %d", winner, i)
			}
			winner = i
		}
	}
	if winner < 0 {
		t.Fatal("no rotation succeeded")
	}
	want := "response of " + id("g", winner)
	for i, r := range results {
		if i == winner {
			continue
		}
		equal(t, "outcome", r.Outcome, store.OutcomeGraceReplay)
		equal(t, "replay", string(r.Replay), want)
	}
	// Exactly one successor exists, and it is live.
	for i := range n {
		_, err := s.GetToken(t.Context(), hash(id("g", i)+"/rt"))
		if i == winner {
			must(t, err)
		} else {
			wantErr(t, err, store.ErrNotFound)
		}
	}
	live, err := s.CountLiveTokens(t.Context(), project, now)
	must(t, err)
	equal(t, "live (old access, new pair)", live, map[string]int64{"c1": 3})
}

func testRotateConcurrentNoGrace(t *testing.T, s store.Store) {
	issue(t, s, "f1", "c1", "alice")
	const n = 50
	now := at(time.Minute)
	var rotated, reused, inactive atomic.Int64
	errs := make([]error, n)
	parallel(n, func(i int) {
		r, err := rotate(t, s, "f1", id("g", i), now, 0)
		errs[i] = err
		switch r.Outcome {
		case store.OutcomeRotated:
			rotated.Add(1)
		case store.OutcomeReuseDetected:
			reused.Add(1)
		case store.OutcomeInactive:
			inactive.Add(1)
		}
	})
	for _, err := range errs {
		must(t, err)
	}
	equal(t, "rotated", rotated.Load(), int64(1))
	if reused.Load() < 1 || reused.Load()+inactive.Load() != n-1 {
		t.Fatalf("reused %d, inactive %d: every other presentation must detect reuse or find the token ended",
			reused.Load(), inactive.Load())
	}
	live, err := s.CountLiveTokens(t.Context(), project, now)
	must(t, err)
	equal(t, "live after reuse", len(live), 0)
}

func testRotateReplayForgotten(t *testing.T, s store.Store) {
	issue(t, s, "f1", "c1", "alice")
	issue(t, s, "f2", "c1", "bob")
	_, err := rotate(t, s, "f1", "g1", at(time.Minute), grace)
	must(t, err)
	_, err = rotate(t, s, "f2", "h1", at(time.Minute+grace), grace)
	must(t, err)

	res, err := s.GarbageCollect(t.Context(), at(time.Minute+grace))
	must(t, err)
	equal(t, "replays cleared", res["token_replays"], int64(1))
	// Inside its own window the second replay is still there.
	r, err := rotate(t, s, "f2", "retry", at(time.Minute+grace+time.Second), grace)
	must(t, err)
	equal(t, "replay kept inside its window", r.Outcome, store.OutcomeGraceReplay)
	equal(t, "replay", string(r.Replay), "response of h1")
}

// TokenHolder reads a token with the person it was issued for: only that person, in the
// token's own project.
func testTokenHolder(t *testing.T, s store.Store) {
	ctx := t.Context()
	alice, err := s.UpsertPerson(ctx, store.Person{Project: project, ID: "alice", Source: "password", SourceSubject: "alice@x",
		Email: "alice@x", Name: "Alice", CreatedAt: base})
	must(t, err)
	// A person with the same id in another project must not be taken for alice's holder there.
	_, err = s.UpsertPerson(ctx, store.Person{Project: "team-b/main", ID: "bob", Source: "password", SourceSubject: "bob@x", CreatedAt: base})
	must(t, err)
	tok := func(name, subject string) store.Token {
		t.Helper()
		x := store.Token{Hash: hash("holder/" + name), Kind: store.RefreshToken, Project: project, ClientID: "web", Subject: subject,
			Scopes: []string{"openid"}, FamilyID: "fam-" + name, AuthTime: base, IssuedAt: base, ExpiresAt: at(time.Hour)}
		must(t, s.CreateTokens(ctx, x))
		return x
	}
	cases := []struct {
		name      string
		token     store.Token
		wantFound bool
	}{
		{"alice's", tok("alice", "alice"), true},
		{"a removed person's", tok("gone", "gone"), false},
		{"bob's id in a project he is not in", tok("bob-here", "bob"), false},
		{"a machine's (no person)", tok("machine", ""), false},
	}
	for _, tc := range cases {
		got, holder, found, err := s.TokenHolder(ctx, tc.token.Hash)
		must(t, err)
		equal(t, tc.name+": token", got.FamilyID+" "+got.Subject+" "+got.Project, tc.token.FamilyID+" "+tc.token.Subject+" "+tc.token.Project)
		equal(t, tc.name+": found", found, tc.wantFound)
		if tc.wantFound {
			equal(t, tc.name+": holder", holder, alice)
		} else {
			equal(t, tc.name+": no holder", holder, store.Person{})
		}
	}
	if _, _, _, err := s.TokenHolder(ctx, hash("holder/none")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("TokenHolder of an unknown token: %v, want ErrNotFound", err)
	}
}
