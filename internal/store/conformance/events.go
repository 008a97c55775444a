package conformance

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

func testAudit(t *testing.T, s store.Store) {
	ctx := t.Context()
	recs := []store.AuditRecord{
		{Project: project, Time: base, Actor: "alice", Action: "connection.saved", Target: "conn-1",
			Details: map[string]string{"connector": "github", "account": "alice-gh"}},
		{Project: project, Time: at(time.Second), Actor: "system", Action: "link.refused", Target: "link-1"},
		{Project: "team-b/main", Time: at(time.Second), Actor: "bob", Action: "x", Target: "y"},
		{Project: project, Time: at(2 * time.Second), Actor: "client:c1", Action: "token.reuse", Target: "f1"},
	}
	for _, r := range recs {
		must(t, s.AppendAudit(ctx, r))
	}
	got, err := s.ListAudit(ctx, project, 2)
	must(t, err)
	if len(got) != 2 {
		t.Fatalf("ListAudit(limit 2) returned %d records", len(got))
	}
	equal(t, "newest first", got[0].Action, "token.reuse")
	equal(t, "then", got[1].Action, "link.refused")
	if got[0].ID <= got[1].ID {
		t.Fatalf("ids not increasing: %d then %d", got[1].ID, got[0].ID)
	}

	all, err := s.ListAudit(ctx, project, 0)
	must(t, err)
	equal(t, "all of the project", len(all), 3)
	first := all[2]
	first.ID = 0
	equal(t, "round trip", first, recs[0])
}

func newEvent(id, sink string, created time.Time) store.Event {
	return store.Event{ID: id, Project: project, Sink: sink, Type: "dev.latchkey.link.refused",
		Data: []byte(`{"link":"` + id + `"}`), CreatedAt: created}
}

func testOutboxLifecycle(t *testing.T, s store.Store) {
	ctx := t.Context()
	later := newEvent("e3", "ops", base)
	later.NextAttempt = at(time.Hour)
	must(t, s.EnqueueEvents(ctx, newEvent("e1", "ops", base), newEvent("e2", "ops", at(time.Second)), later))
	depth, err := s.OutboxDepth(ctx)
	must(t, err)
	equal(t, "depth", depth, int64(3))

	const lease = 30 * time.Second
	now := at(time.Minute)
	got, err := s.ClaimEvents(ctx, now, lease, 10)
	must(t, err)
	if len(got) != 2 || got[0].ID != "e1" || got[1].ID != "e2" {
		t.Fatalf("claimed %+v, want e1 and e2", got)
	}
	want := newEvent("e1", "ops", base)
	want.NextAttempt = now.Add(lease)
	equal(t, "claimed event", got[0], want)

	// Leased: not due again until the lease ends.
	got, err = s.ClaimEvents(ctx, now.Add(lease-time.Nanosecond), lease, 10)
	must(t, err)
	equal(t, "claimed while leased", len(got), 0)

	must(t, s.MarkDelivered(ctx, "e1", "ops", now.Add(time.Second)))
	must(t, s.MarkDelivered(ctx, "e1", "ops", now.Add(2*time.Second))) // again: no change
	must(t, s.MarkFailed(ctx, "e2", "ops", now.Add(5*time.Minute)))
	wantErr(t, s.MarkDelivered(ctx, "nope", "ops", now), store.ErrNotFound)
	wantErr(t, s.MarkFailed(ctx, "e1", "ops", now), store.ErrNotFound) // already delivered
	depth, err = s.OutboxDepth(ctx)
	must(t, err)
	equal(t, "depth after delivery", depth, int64(2))

	// After the lease, the failed one waits for its retry time; the delivered one never returns.
	got, err = s.ClaimEvents(ctx, now.Add(lease), lease, 10)
	must(t, err)
	equal(t, "claimed before retry time", len(got), 0)
	got, err = s.ClaimEvents(ctx, now.Add(5*time.Minute), lease, 10)
	must(t, err)
	if len(got) != 1 || got[0].ID != "e2" || got[0].Attempts != 1 {
		t.Fatalf("claimed %+v, want e2 after one failed attempt", got)
	}
	must(t, s.MarkDelivered(ctx, "e2", "ops", now.Add(5*time.Minute)))
	got, err = s.ClaimEvents(ctx, at(time.Hour), lease, 10)
	must(t, err)
	if len(got) != 1 || got[0].ID != "e3" {
		t.Fatalf("claimed %+v, want e3 when it falls due", got)
	}

	// The limit is honoured.
	var many []store.Event
	for i := range 5 {
		many = append(many, newEvent(id("m", i), "ops", base))
	}
	must(t, s.EnqueueEvents(ctx, many...))
	got, err = s.ClaimEvents(ctx, at(2*time.Hour), lease, 3)
	must(t, err)
	equal(t, "limit", len(got), 3)
}

func testOutboxDuplicate(t *testing.T, s store.Store) {
	ctx := t.Context()
	must(t, s.EnqueueEvents(ctx, newEvent("e1", "ops", base), newEvent("e1", "audit-log", base)))
	wantErr(t, s.EnqueueEvents(ctx, newEvent("e2", "ops", base), newEvent("e1", "ops", base)), store.ErrConflict)
	depth, err := s.OutboxDepth(ctx)
	must(t, err)
	equal(t, "depth (the failed batch stored nothing)", depth, int64(2))
}

// Two replicas claiming at once never both get an event.
func testOutboxClaimConcurrent(t *testing.T, s store.Store) {
	ctx := t.Context()
	const n = 100
	var evs []store.Event
	for i := range n {
		evs = append(evs, newEvent(id("e", i), "ops", base))
	}
	must(t, s.EnqueueEvents(ctx, evs...))

	var mu sync.Mutex
	claims := map[string]int{}
	const workers = 4
	errs := make([]error, workers)
	parallel(workers, func(w int) {
		for {
			got, err := s.ClaimEvents(ctx, at(time.Minute), time.Minute, 7)
			if err != nil {
				errs[w] = err
				return
			}
			if len(got) == 0 {
				return
			}
			mu.Lock()
			for _, e := range got {
				claims[e.ID]++
			}
			mu.Unlock()
		}
	})
	for _, err := range errs {
		must(t, err)
	}
	equal(t, "events claimed", len(claims), n)
	for id, c := range claims {
		if c != 1 {
			t.Fatalf("event %s claimed %d times", id, c)
		}
	}
}

// ---------------------------------------------------------------------------------------------

func testGarbageCollect(t *testing.T, s store.Store) {
	ctx := t.Context()
	now := at(2 * time.Hour)

	// Expired before now.
	must(t, s.CreateSession(ctx, store.Session{IDHash: hash("old"), Project: project, Subject: "alice",
		AuthTime: base, CreatedAt: base, ExpiresAt: at(time.Hour)}))
	must(t, s.CreateAuthCode(ctx, store.AuthCode{Hash: hash("old"), Project: project, ClientID: "c1",
		Subject: "alice", CreatedAt: base, ExpiresAt: at(time.Minute)}))
	issue(t, s, "f1", "c1", "alice") // access expires at base+1h, refresh lives on
	old := newCallback("old")
	must(t, s.CreateCallbackState(ctx, old))
	_, _, err := s.OpenLink(ctx, newLink("old", store.LinkConnect, base), base)
	must(t, err)
	must(t, s.EnqueueEvents(ctx, newEvent("done", "ops", base), newEvent("pending", "ops", base)))
	must(t, s.MarkDelivered(ctx, "done", "ops", at(time.Minute)))
	must(t, s.CreatePasskeyCeremony(ctx, newCeremony("old", at(time.Minute))))

	// Still live at now.
	must(t, s.CreateSession(ctx, store.Session{IDHash: hash("live"), Project: project, Subject: "alice",
		AuthTime: now, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}))
	live := newCallback("live")
	live.ExpiresAt = now.Add(time.Minute)
	must(t, s.CreateCallbackState(ctx, live))
	_, _, err = s.OpenLink(ctx, store.Link{ID: "live", CodeHash: hash("live"), Project: project, Subject: "bob",
		ClientID: "c1", Connector: "github", Kind: store.LinkConnect, ExpiresAt: now.Add(time.Minute), CreatedAt: now}, now)
	must(t, err)
	must(t, s.CreatePasskeyCeremony(ctx, newCeremony("live", now.Add(time.Minute))))

	res, err := s.GarbageCollect(ctx, now)
	must(t, err)
	for table, want := range map[string]int64{"sessions": 1, "auth_codes": 1, "tokens": 1, "callback_states": 1,
		"links": 1, "events": 1, "passkey_ceremonies": 1} {
		if res[table] != want {
			t.Errorf("GarbageCollect removed %d from %s, want %d (result %v)", res[table], table, want, res)
		}
	}

	_, err = s.GetSession(ctx, hash("live"), now)
	must(t, err)
	_, err = s.GetCallbackState(ctx, live.StateHash, now)
	must(t, err)
	_, err = s.TakePasskeyCeremony(ctx, hash("ceremony-live"), now)
	must(t, err)
	_, err = s.GetLinkByCode(ctx, hash("live"), now)
	must(t, err)
	if !getToken(t, s, "f1/rt").Active(now) {
		t.Fatal("a live refresh token was collected")
	}
	_, err = s.GetToken(ctx, hash("f1/at"))
	wantErr(t, err, store.ErrNotFound)
	depth, err := s.OutboxDepth(ctx)
	must(t, err)
	equal(t, "undelivered events are kept", depth, int64(1))

	res, err = s.GarbageCollect(ctx, now)
	must(t, err)
	for table, n := range res {
		if n != 0 {
			t.Errorf("second collection removed %d from %s", n, table)
		}
	}
}

// Every appended record is relayed once, with the events fanOut made for it, in one
// transaction: a failing fanOut queues nothing and leaves the records pending.
func testAuditRelay(t *testing.T, s store.Store) {
	ctx := t.Context()
	full := store.AuditRecord{Project: project, Time: base, Actor: "client:c1", Action: "token.exchanged", Target: "alice",
		ClientID: "c1", Connector: "team-a/github", Outcome: store.OutcomeRefused, Reason: "connect_required",
		Details: map[string]string{"audience": "github"}}
	must(t, s.AppendAudit(ctx, full))
	must(t, s.AppendAudit(ctx, store.AuditRecord{Project: "team-b/main", Time: at(time.Second), Actor: "bob", Action: "signin.succeeded", Target: "bob"}))
	must(t, s.AppendAudit(ctx, store.AuditRecord{Project: project, Time: at(2 * time.Second), Actor: "system", Action: "policy.changed", Target: "p"}))

	// The new fields round-trip.
	got, err := s.ListAudit(ctx, project, 0)
	must(t, err)
	last := got[len(got)-1]
	last.ID = 0
	equal(t, "round trip", last, full)

	boom := errors.New("boom")
	_, err = s.RelayAudit(ctx, 10, func(recs []store.AuditRecord) ([]store.Event, error) {
		return nil, boom
	})
	wantErr(t, err, boom)

	var seen []string
	n, err := s.RelayAudit(ctx, 2, func(recs []store.AuditRecord) ([]store.Event, error) {
		var out []store.Event
		for _, r := range recs {
			seen = append(seen, r.Action)
			out = append(out, newEvent("ev-"+r.Action, "ops", r.Time))
		}
		return out, nil
	})
	must(t, err)
	equal(t, "relayed", n, 2)
	equal(t, "oldest first, every project", seen, []string{"token.exchanged", "signin.succeeded"})
	depth, err := s.OutboxDepth(ctx)
	must(t, err)
	equal(t, "queued", depth, int64(2))

	seen = nil
	n, err = s.RelayAudit(ctx, 10, func(recs []store.AuditRecord) ([]store.Event, error) {
		for _, r := range recs {
			seen = append(seen, r.Action)
		}
		return nil, nil // no sink: relayed all the same
	})
	must(t, err)
	equal(t, "relayed the rest", n, 1)
	equal(t, "the rest", seen, []string{"policy.changed"})
	n, err = s.RelayAudit(ctx, 10, func(recs []store.AuditRecord) ([]store.Event, error) {
		t.Fatalf("relayed again: %+v", recs)
		return nil, nil
	})
	must(t, err)
	equal(t, "nothing left", n, 0)
	evs, err := s.ClaimEvents(ctx, at(time.Hour), time.Minute, 10)
	must(t, err)
	equal(t, "claimable", len(evs), 2)
}

// Replicas relaying at once hand each record to exactly one of them.
func testAuditRelayConcurrent(t *testing.T, s store.Store) {
	ctx := t.Context()
	const n = 60
	for i := range n {
		must(t, s.AppendAudit(ctx, store.AuditRecord{Project: project, Time: at(time.Duration(i)), Actor: "a", Action: id("act", i), Target: "x"}))
	}
	var mu sync.Mutex
	relayed := map[string]int{}
	const workers = 4
	errs := make([]error, workers)
	parallel(workers, func(w int) {
		for {
			got, err := s.RelayAudit(ctx, 7, func(recs []store.AuditRecord) ([]store.Event, error) {
				out := make([]store.Event, 0, len(recs))
				for _, r := range recs {
					out = append(out, newEvent(r.Action, "ops", base))
				}
				return out, nil
			})
			if err != nil {
				errs[w] = err
				return
			}
			if got == 0 {
				return
			}
		}
	})
	for _, err := range errs {
		must(t, err)
	}
	evs, err := s.ClaimEvents(ctx, at(time.Hour), time.Minute, 1000)
	must(t, err)
	for _, e := range evs {
		mu.Lock()
		relayed[e.ID]++
		mu.Unlock()
	}
	equal(t, "records relayed", len(relayed), n)
	for id, c := range relayed {
		if c != 1 {
			t.Fatalf("record %s relayed %d times", id, c)
		}
	}
}

// Queued records: every one stored, each caller's in the order it queued them, and seen at
// once by reads through the same store (the audit log, the relay to the sinks).
func testAuditQueued(t *testing.T, s store.Store) {
	ctx := t.Context()
	// More than one batch's worth (500), from several callers at once, beside records
	// written before the answer.
	const callers, each = 8, 90
	parallel(callers, func(w int) {
		for i := range each {
			r := store.AuditRecord{Project: project, Time: at(time.Duration(i)), Actor: id("client:c", w), Action: "token.issued",
				Target: id("seq", i), ClientID: id("c", w), Outcome: store.OutcomeSuccess,
				Details: map[string]string{"grant_type": "client_credentials", "n": id("", i)}}
			if i%30 == 0 {
				if err := s.AppendAudit(ctx, r); err != nil {
					t.Errorf("AppendAudit: %v", err)
				}
				continue
			}
			if err := s.QueueAudit(ctx, r); err != nil {
				t.Errorf("QueueAudit: %v", err)
			}
		}
	})
	got, err := s.ListAudit(ctx, project, callers*each+10)
	must(t, err)
	equal(t, "every record, queued or written, read back at once", len(got), callers*each)
	// Per caller, oldest first, the queued records keep their order (a record written before
	// the answer may be stored ahead of records its caller queued earlier).
	next := map[string]int{}
	for i := len(got) - 1; i >= 0; i-- {
		r := got[i]
		if r.Details["n"] == id("", 0) || r.Details["n"] == id("", 30) || r.Details["n"] == id("", 60) {
			continue // written, not queued
		}
		for next[r.Actor]%30 == 0 {
			next[r.Actor]++
		}
		want := id("seq", next[r.Actor])
		if r.Target != want {
			t.Fatalf("%s's records out of order: %s where %s was expected", r.Actor, r.Target, want)
		}
		if r.Details["grant_type"] != "client_credentials" || r.Outcome != store.OutcomeSuccess {
			t.Fatalf("record did not round-trip: %+v", r)
		}
		next[r.Actor]++
	}

	// Queued just now, relayed to the sinks by the next relay.
	must(t, s.QueueAudit(ctx, store.AuditRecord{Project: project, Time: at(time.Hour), Actor: "client:c9", Action: "token.exchanged", Target: "late"}))
	relayed := 0
	var last store.AuditRecord
	for {
		n, err := s.RelayAudit(ctx, 1000, func(recs []store.AuditRecord) ([]store.Event, error) {
			if len(recs) > 0 {
				last = recs[len(recs)-1]
			}
			return nil, nil
		})
		must(t, err)
		if n == 0 {
			break
		}
		relayed += n
	}
	equal(t, "relayed", relayed, callers*each+1)
	equal(t, "the last queued record relayed last", last.Target, "late")
}

// Records stored in a batch before the caller goes on: each read back at once, beside records
// queued and written from other callers at the same time; a caller that gave up (its request
// ended) is told so.
func testAuditBatched(t *testing.T, s store.Store) {
	ctx := t.Context()
	const callers, each = 8, 30
	parallel(callers, func(w int) {
		for i := range each {
			r := store.AuditRecord{Project: project, Time: at(time.Duration(i)), Actor: id("client:c", w), Action: "token.exchanged",
				Target: id("seq", i), ClientID: id("c", w), Outcome: store.OutcomeSuccess, Details: map[string]string{"n": id("", i)}}
			var err error
			switch i % 3 {
			case 0:
				err = s.AppendAuditBatched(ctx, r)
			case 1:
				err = s.QueueAudit(ctx, r)
			default:
				err = s.AppendAudit(ctx, r)
			}
			if err != nil {
				t.Errorf("record %d of caller %d: %v", i, w, err)
			}
		}
	})
	got, err := s.ListAudit(ctx, project, callers*each+10)
	must(t, err)
	equal(t, "every record read back", len(got), callers*each)
	for _, r := range got {
		if r.Details["n"] == "" || r.Outcome != store.OutcomeSuccess {
			t.Fatalf("record did not round-trip: %+v", r)
		}
	}

	done, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.AppendAuditBatched(done, store.AuditRecord{Project: project, Time: at(0), Actor: "client:c", Action: "token.exchanged"}); err == nil {
		t.Error("AppendAuditBatched with an ended context reported the record stored")
	}
}
