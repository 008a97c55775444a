package conformance

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

// signedIn gives subject a session (cookie name, provider session sid), a token family of
// client c1 and of c2, and a pending callback attempt.
func signedIn(t *testing.T, s store.Store, subject, sid string) {
	t.Helper()
	ctx := t.Context()
	must(t, s.CreateSession(ctx, store.Session{IDHash: hash("cookie-" + subject), Project: project, Subject: subject,
		AuthTime: base, CreatedAt: base, ExpiresAt: at(time.Hour), UpstreamSID: sid}))
	issue(t, s, subject+"-1", "c1", subject)
	issue(t, s, subject+"-2", "c2", subject)
	cb := newCallback(subject)
	cb.Subject = subject
	must(t, s.CreateCallbackState(ctx, cb))
	must(t, s.SavePersonCheck(ctx, store.PersonCheck{Project: project, Subject: subject, KeyID: "k1",
		RefreshToken: []byte("sealed " + subject), CheckedAt: base}))
	must(t, s.AddPasskey(ctx, newPasskey(subject, subject, base)))
	code := newCode("code-" + subject)
	code.Subject, code.ExpiresAt = subject, at(time.Hour)
	must(t, s.CreateAuthCode(ctx, code))
}

// errKeep refuses a code in a redemption's check, so looking at a code does not spend it.
var errKeep = errors.New("keep the code")

// wantWaysInEnded checks that subject's passkey and unredeemed code are gone (ended) or both
// still there (!ended).
func wantWaysInEnded(t *testing.T, s store.Store, subject string, now time.Time, ended bool) {
	t.Helper()
	ctx := t.Context()
	_, err := s.GetPasskey(ctx, project, []byte("cred-"+subject))
	if gone := errors.Is(err, store.ErrNotFound); gone != ended {
		t.Errorf("%s's passkey gone = %v (%v), want %v", subject, gone, err, ended)
	}
	_, err = s.RedeemAuthCode(ctx, hash("code-"+subject), now, func(store.AuthCode) error { return errKeep })
	if gone := errors.Is(err, store.ErrNotFound); gone != ended || (!ended && !errors.Is(err, errKeep)) {
		t.Errorf("%s's code gone = %v (%v), want %v", subject, gone, err, ended)
	}
}

// wantSignedOut checks that subject has no session, live token, callback attempt or check left
// (ended), or all of them (!ended).
func wantSignedOut(t *testing.T, s store.Store, subject string, now time.Time, ended bool) {
	t.Helper()
	ctx := t.Context()
	_, err := s.GetSession(ctx, hash("cookie-"+subject), now)
	if gone := errors.Is(err, store.ErrNotFound); gone != ended {
		t.Errorf("%s's session gone = %v (%v), want %v", subject, gone, err, ended)
	}
	for _, name := range []string{subject + "-1/at", subject + "-1/rt", subject + "-2/at", subject + "-2/rt"} {
		if tok := getToken(t, s, name); tok.Active(now) == ended {
			t.Errorf("token %s active = %v, want %v", name, tok.Active(now), !ended)
		}
	}
	_, err = s.GetCallbackState(ctx, hash("state-"+subject), now)
	if gone := errors.Is(err, store.ErrNotFound); gone != ended {
		t.Errorf("%s's callback attempt gone = %v, want %v", subject, gone, ended)
	}
	_, err = s.UpdatePersonCheck(ctx, project, subject, func(c store.PersonCheck) (store.PersonCheck, error) { return c, nil })
	if gone := errors.Is(err, store.ErrNotFound); gone != ended {
		t.Errorf("%s's person check gone = %v, want %v", subject, gone, ended)
	}
	wantWaysInEnded(t, s, subject, now, ended)
}

func testEndSignIns(t *testing.T, s store.Store) {
	ctx := t.Context()
	person(t, s, project, "alice", "alice@example.com", base)
	person(t, s, project, "bob", "bob@example.com", base)
	signedIn(t, s, "alice", "")
	signedIn(t, s, "bob", "")
	// A passkey enrolment alice started ends with her; a sign-in ceremony names nobody and stays.
	enrol := newCeremony("enrol-alice", at(time.Hour))
	enrol.Kind, enrol.Subject = "enrol", "alice"
	must(t, s.CreatePasskeyCeremony(ctx, enrol))
	must(t, s.CreatePasskeyCeremony(ctx, newCeremony("sign-in", at(time.Hour))))
	now := at(time.Minute)

	got, err := s.EndSignIns(ctx, project, "alice", now)
	must(t, err)
	equal(t, "ended", got, store.Ended{Subjects: []string{"alice"}, Sessions: 1, Tokens: 4, Callbacks: 1, Passkeys: 1, Codes: 1})
	wantSignedOut(t, s, "alice", now, true)
	wantSignedOut(t, s, "bob", now, false)
	_, err = s.TakePasskeyCeremony(ctx, enrol.IDHash, now)
	wantErr(t, err, store.ErrNotFound)
	_, err = s.TakePasskeyCeremony(ctx, hash("ceremony-sign-in"), now)
	must(t, err)
	alice, err := s.GetPerson(ctx, project, "alice")
	must(t, err)
	equal(t, "alice's access ended at", alice.AccessEndedAt, now)
	bob, err := s.GetPerson(ctx, project, "bob")
	must(t, err)
	equal(t, "bob's access ended at", bob.AccessEndedAt, time.Time{})

	// Again: nothing left to end, and that is not an error.
	got, err = s.EndSignIns(ctx, project, "alice", now)
	must(t, err)
	equal(t, "ended again", got, store.Ended{Subjects: []string{"alice"}})

	// The same person id in another project is someone else.
	got, err = s.EndSignIns(ctx, "team-b/main", "bob", now)
	must(t, err)
	equal(t, "other project", got.Tokens+got.Sessions, int64(0))
	wantSignedOut(t, s, "bob", now, false)
}

func testLogout(t *testing.T, s store.Store) {
	ctx := t.Context()
	const iss = "https://idp.example"
	for _, p := range []store.Person{
		{Project: project, ID: "alice", Source: "oidc", SourceSubject: iss + "|a-1", CreatedAt: base},
		{Project: project, ID: "bob", Source: "oidc", SourceSubject: iss + "|b-1", CreatedAt: base},
		{Project: project, ID: "carol", Source: "password", SourceSubject: "carol@example.com", CreatedAt: base},
	} {
		_, err := s.UpsertPerson(ctx, p)
		must(t, err)
	}
	signedIn(t, s, "alice", iss+"|sid-a")
	signedIn(t, s, "bob", iss+"|sid-b")
	signedIn(t, s, "carol", "")
	now := at(time.Minute)
	sess, err := s.GetSession(ctx, hash("cookie-bob"), now)
	must(t, err)
	equal(t, "session keeps the provider's sid", sess.UpstreamSID, iss+"|sid-b")

	// By the person (sub).
	l := store.Logout{Project: project, SourceSubject: iss + "|a-1", JTI: "jti-1", Until: at(time.Hour), Now: now}
	got, err := s.Logout(ctx, l)
	must(t, err)
	equal(t, "by sub", got, store.Ended{Subjects: []string{"alice"}, Sessions: 1, Tokens: 4, Callbacks: 1, Passkeys: 1, Codes: 1})
	wantSignedOut(t, s, "alice", now, true)
	wantSignedOut(t, s, "bob", now, false)
	alice, err := s.GetPerson(ctx, project, "alice")
	must(t, err)
	equal(t, "alice's access ended at", alice.AccessEndedAt, now)

	// The same token again ends nothing, even once the person has signed in again.
	must(t, s.CreateSession(ctx, store.Session{IDHash: hash("cookie-alice-again"), Project: project, Subject: "alice",
		AuthTime: now, CreatedAt: now, ExpiresAt: at(time.Hour), UpstreamSID: iss + "|sid-a2"}))
	issue(t, s, "alice-3", "c1", "alice")
	_, err = s.Logout(ctx, l)
	wantErr(t, err, store.ErrConflict)
	_, err = s.GetSession(ctx, hash("cookie-alice-again"), now)
	must(t, err)
	if !getToken(t, s, "alice-3/rt").Active(now) {
		t.Error("a replayed logout token ended a later sign-in's token")
	}
	// Not even with other claims: the id alone is remembered.
	_, err = s.Logout(ctx, store.Logout{Project: project, SID: iss + "|sid-b", JTI: "jti-1", Until: at(time.Hour), Now: now})
	wantErr(t, err, store.ErrConflict)
	wantSignedOut(t, s, "bob", now, false)

	// By the provider's session alone.
	got, err = s.Logout(ctx, store.Logout{Project: project, SID: iss + "|sid-b", JTI: "jti-2", Until: at(time.Hour), Now: now})
	must(t, err)
	equal(t, "by sid", got, store.Ended{Subjects: []string{"bob"}, Sessions: 1, Tokens: 4, Callbacks: 1, Passkeys: 1, Codes: 1})
	wantSignedOut(t, s, "bob", now, true)

	// Nobody it names: nothing ended, the id is still remembered. A password person's sid is
	// empty and never matches.
	got, err = s.Logout(ctx, store.Logout{Project: project, SID: iss + "|unknown", JTI: "jti-3", Until: at(time.Hour), Now: now})
	must(t, err)
	equal(t, "unknown sid", got, store.Ended{})
	got, err = s.Logout(ctx, store.Logout{Project: project, SourceSubject: "carol@example.com", JTI: "jti-4", Until: at(time.Hour), Now: now})
	must(t, err)
	equal(t, "not an oidc person", got, store.Ended{})
	wantSignedOut(t, s, "carol", now, false)

	// Token ids are remembered per project.
	got, err = s.Logout(ctx, store.Logout{Project: "team-b/main", SourceSubject: iss + "|a-1", JTI: "jti-1", Until: at(time.Hour), Now: now})
	must(t, err)
	equal(t, "other project", got, store.Ended{})
	_, err = s.GetSession(ctx, hash("cookie-alice-again"), now)
	must(t, err)

	// Forgotten once expired.
	res, err := s.GarbageCollect(ctx, at(2*time.Hour))
	must(t, err)
	equal(t, "collected", res["logout_tokens"], int64(5))
}

func testSavePersonCheck(t *testing.T, s store.Store) {
	ctx := t.Context()
	c := store.PersonCheck{Project: project, Subject: "alice", KeyID: "k1", RefreshToken: []byte("sealed 1"), CheckedAt: base}
	must(t, s.SavePersonCheck(ctx, c))
	read := func() store.PersonCheck {
		got, err := s.UpdatePersonCheck(ctx, project, "alice", func(c store.PersonCheck) (store.PersonCheck, error) { return c, nil })
		must(t, err)
		return got
	}
	equal(t, "saved", read(), c)

	// Signing in again replaces the token and the time, and clears a lease.
	_, err := s.UpdatePersonCheck(ctx, project, "alice", func(c store.PersonCheck) (store.PersonCheck, error) {
		c.TriedAt = at(time.Minute)
		return c, nil
	})
	must(t, err)
	c2 := store.PersonCheck{Project: project, Subject: "alice", KeyID: "k2", RefreshToken: []byte("sealed 2"), CheckedAt: at(time.Hour)}
	must(t, s.SavePersonCheck(ctx, c2))
	equal(t, "replaced", read(), c2)

	_, err = s.UpdatePersonCheck(ctx, "team-b/main", "alice", func(c store.PersonCheck) (store.PersonCheck, error) { return c, nil })
	wantErr(t, err, store.ErrNotFound)
}

func testUpdatePersonCheck(t *testing.T, s store.Store) {
	ctx := t.Context()
	c := store.PersonCheck{Project: project, Subject: "alice", KeyID: "k1", RefreshToken: []byte("sealed 1"), CheckedAt: base}
	must(t, s.SavePersonCheck(ctx, c))

	// fn's error leaves the row as it was and returns it.
	errNo := errors.New("not due")
	got, err := s.UpdatePersonCheck(ctx, project, "alice", func(c store.PersonCheck) (store.PersonCheck, error) {
		c.KeyID = "changed"
		return c, errNo
	})
	wantErr(t, err, errNo)
	equal(t, "returned on error", got, c)

	// Project and Subject stay.
	got, err = s.UpdatePersonCheck(ctx, project, "alice", func(c store.PersonCheck) (store.PersonCheck, error) {
		c.Project, c.Subject, c.KeyID, c.RefreshToken, c.CheckedAt = "x/y", "mallory", "k2", []byte("sealed 2"), at(time.Minute)
		return c, nil
	})
	must(t, err)
	want := store.PersonCheck{Project: project, Subject: "alice", KeyID: "k2", RefreshToken: []byte("sealed 2"), CheckedAt: at(time.Minute)}
	equal(t, "updated", got, want)

	_, err = s.UpdatePersonCheck(ctx, project, "bob", func(c store.PersonCheck) (store.PersonCheck, error) { return c, nil })
	wantErr(t, err, store.ErrNotFound)

	// A lease: of many callers that each take the check only when nobody has tried since
	// CheckedAt, exactly one gets it.
	var won atomic.Int32
	parallel(16, func(i int) {
		_, err := s.UpdatePersonCheck(ctx, project, "alice", func(c store.PersonCheck) (store.PersonCheck, error) {
			if c.TriedAt.After(c.CheckedAt) {
				return c, errNo
			}
			c.TriedAt = at(time.Duration(i+2) * time.Minute)
			return c, nil
		})
		if err == nil {
			won.Add(1)
		} else if !errors.Is(err, errNo) {
			t.Errorf("caller %d: %v", i, err)
		}
	})
	equal(t, "callers that took the lease", won.Load(), int32(1))
}
