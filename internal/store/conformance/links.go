package conformance

import (
	"errors"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

const linkLife = 30 * time.Minute

// newLink is a link for alice × repo-helper × github created at created; code names its code.
func newLink(code string, kind store.LinkKind, created time.Time) store.Link {
	return store.Link{ID: "id-" + code, CodeHash: hash(code), SealedCode: []byte("sealed " + code), KeyID: "k1",
		Project: project, Subject: "alice", ClientID: "repo-helper", Connector: "github", Kind: kind,
		ExpiresAt: created.Add(linkLife), CreatedAt: created}
}

func testLinkOpenSameKind(t *testing.T, s store.Store) {
	ctx := t.Context()
	l := newLink("code1", store.LinkConnect, base)
	got, created, err := s.OpenLink(ctx, l, base)
	must(t, err)
	want := l
	want.State = store.LinkOpen
	equal(t, "created", created, true)
	equal(t, "link", got, want)

	// Asking again while it is open hands out the same link.
	got, created, err = s.OpenLink(ctx, newLink("code2", store.LinkConnect, at(time.Minute)), at(time.Minute))
	must(t, err)
	equal(t, "created again", created, false)
	equal(t, "same link", got, want)
	_, err = s.GetLinkByCode(ctx, hash("code2"), at(time.Minute))
	wantErr(t, err, store.ErrNotFound)

	got, err = s.GetLinkByCode(ctx, hash("code1"), at(linkLife-time.Nanosecond))
	must(t, err)
	equal(t, "by code", got, want)
	_, err = s.GetLinkByCode(ctx, hash("code1"), at(linkLife))
	wantErr(t, err, store.ErrNotFound)
}

func testLinkReplace(t *testing.T, s store.Store) {
	ctx := t.Context()
	_, _, err := s.OpenLink(ctx, newLink("code1", store.LinkConnect, base), base)
	must(t, err)
	// What the link asks for changed: the old code stops working.
	got, created, err := s.OpenLink(ctx, newLink("code2", store.LinkAllow, at(time.Minute)), at(time.Minute))
	must(t, err)
	equal(t, "created", created, true)
	equal(t, "id", got.ID, "id-code2")
	_, err = s.GetLinkByCode(ctx, hash("code1"), at(time.Minute))
	wantErr(t, err, store.ErrNotFound)
	wantErr(t, s.CloseLink(ctx, "id-code1", store.LinkDone, at(time.Minute)), store.ErrNotFound)
	got, err = s.GetLinkByCode(ctx, hash("code2"), at(time.Minute))
	must(t, err)
	equal(t, "kind", got.Kind, store.LinkAllow)
}

func testLinkExpired(t *testing.T, s store.Store) {
	ctx := t.Context()
	_, _, err := s.OpenLink(ctx, newLink("code1", store.LinkConnect, base), base)
	must(t, err)
	now := at(linkLife)
	got, created, err := s.OpenLink(ctx, newLink("code2", store.LinkConnect, now), now)
	must(t, err)
	equal(t, "an expired link is not reused", created, true)
	equal(t, "id", got.ID, "id-code2")
	// The expired one cannot be closed any more: it was replaced.
	wantErr(t, s.CloseLink(ctx, "id-code1", store.LinkDone, now), store.ErrNotFound)
}

func testLinkClose(t *testing.T, s store.Store) {
	ctx := t.Context()
	_, _, err := s.OpenLink(ctx, newLink("code1", store.LinkConnect, base), base)
	must(t, err)
	if err := s.CloseLink(ctx, "id-code1", store.LinkOpen, at(time.Minute)); err == nil || errors.Is(err, store.ErrNotFound) {
		t.Fatalf("closing to state open: error = %v, want a usage error", err)
	}
	must(t, s.CloseLink(ctx, "id-code1", store.LinkDone, at(time.Minute)))
	_, err = s.GetLinkByCode(ctx, hash("code1"), at(time.Minute))
	wantErr(t, err, store.ErrNotFound)
	wantErr(t, s.CloseLink(ctx, "id-code1", store.LinkDeclined, at(time.Minute)), store.ErrNotFound)
	wantErr(t, s.CloseLink(ctx, "unknown", store.LinkDone, at(time.Minute)), store.ErrNotFound)

	// A closed link does not block the next one.
	got, created, err := s.OpenLink(ctx, newLink("code2", store.LinkConnect, at(2*time.Minute)), at(2*time.Minute))
	must(t, err)
	equal(t, "created after close", created, true)
	must(t, s.CloseLink(ctx, got.ID, store.LinkDeclined, at(3*time.Minute)))
}

func testLinkScope(t *testing.T, s store.Store) {
	ctx := t.Context()
	l := newLink("code1", store.LinkConnect, base)
	_, _, err := s.OpenLink(ctx, l, base)
	must(t, err)
	variants := []func(*store.Link){
		func(l *store.Link) { l.Subject = "bob" },
		func(l *store.Link) { l.ClientID = "other-agent" },
		func(l *store.Link) { l.Connector = "gitlab" },
		func(l *store.Link) { l.Project = "team-b/main" },
	}
	for i, change := range variants {
		v := newLink(id("v", i), store.LinkConnect, base)
		change(&v)
		_, created, err := s.OpenLink(ctx, v, base)
		must(t, err)
		equal(t, "a link of another person, agent, connector or project", created, true)
	}
	_, err = s.GetLinkByCode(ctx, hash("code1"), base)
	must(t, err)
}

func testLinkOpenConcurrent(t *testing.T, s store.Store) {
	ctx := t.Context()
	const n = 64
	links := make([]store.Link, n)
	created := make([]bool, n)
	errs := make([]error, n)
	parallel(n, func(i int) {
		links[i], created[i], errs[i] = s.OpenLink(ctx, newLink(id("code", i), store.LinkConnect, base), base)
	})
	winners := 0
	for i := range n {
		must(t, errs[i])
		if created[i] {
			winners++
		}
		equal(t, "every caller gets the same link", links[i].ID, links[0].ID)
	}
	equal(t, "links created", winners, 1)
}

func testLinkOpenConcurrentMixed(t *testing.T, s store.Store) {
	ctx := t.Context()
	const n = 64
	kinds := []store.LinkKind{store.LinkConnect, store.LinkAllow}
	errs := make([]error, n)
	parallel(n, func(i int) {
		_, _, errs[i] = s.OpenLink(ctx, newLink(id("code", i), kinds[i%2], base), base)
	})
	for _, err := range errs {
		must(t, err)
	}
	open := 0
	for i := range n {
		if _, err := s.GetLinkByCode(ctx, hash(id("code", i)), base); err == nil {
			open++
		} else {
			wantErr(t, err, store.ErrNotFound)
		}
	}
	equal(t, "open links", open, 1)
}
