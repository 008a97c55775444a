package upstream

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/store"
)

// Defaults of a Refresher (docs/connection-health.md).
const (
	// DefaultRefreshWindow: a connection in use is renewed when its token expires within this.
	DefaultRefreshWindow = 10 * time.Minute
	// DefaultUsedWithin: a connection is in use when an agent received its token this recently.
	DefaultUsedWithin = 24 * time.Hour
	// DefaultRefreshEvery is the mean time between two passes; each wait is jittered.
	DefaultRefreshEvery = time.Minute
	// DefaultRefreshWorkers bounds the refreshes one replica runs at once.
	DefaultRefreshWorkers = 4
	// UseInterval: a replica records a connection's use at most once per interval.
	UseInterval = 10 * time.Minute
)

// dueBatch is how many due connections one query returns; a pass reads every page.
const dueBatch = 100

// uses remembers which connections a vault handed out since the Refresher last asked, in
// memory: a token exchange costs no store round trip for it.
type uses struct {
	mu sync.Mutex
	// pending are uses not yet recorded; written are when each connection's use was last
	// recorded by this process, so it is recorded at most once per UseInterval.
	pending map[connRef]time.Time
	written map[connRef]time.Time
}

type connRef struct{ project, id string }

// used remembers that conn was handed out now, when the vault tracks uses.
func (v *Vault) used(conn store.Connection) {
	if !v.TrackUses {
		return
	}
	now := v.now()
	ref := connRef{conn.Project, conn.ID}
	u := &v.uses
	u.mu.Lock()
	defer u.mu.Unlock()
	if last, ok := u.written[ref]; ok && now.Sub(last) < UseInterval {
		return
	}
	if u.pending == nil {
		u.pending = map[connRef]time.Time{}
	}
	u.pending[ref] = now
}

// TakeUses returns the uses not yet recorded and forgets them; a caller that cannot store them
// gives them back with KeepUses.
func (v *Vault) TakeUses() []store.ConnectionUse {
	u := &v.uses
	u.mu.Lock()
	defer u.mu.Unlock()
	now := v.now()
	if u.written == nil {
		u.written = map[connRef]time.Time{}
	}
	for ref, at := range u.written {
		if now.Sub(at) >= UseInterval {
			delete(u.written, ref)
		}
	}
	out := make([]store.ConnectionUse, 0, len(u.pending))
	for ref, at := range u.pending {
		out = append(out, store.ConnectionUse{Project: ref.project, ID: ref.id, At: at})
		u.written[ref] = at
	}
	clear(u.pending)
	return out
}

// KeepUses gives back uses TakeUses returned that could not be stored.
func (v *Vault) KeepUses(us []store.ConnectionUse) {
	u := &v.uses
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.pending == nil {
		u.pending = map[connRef]time.Time{}
	}
	for _, x := range us {
		ref := connRef{x.Project, x.ID}
		delete(u.written, ref)
		if x.At.After(u.pending[ref]) {
			u.pending[ref] = x.At
		}
	}
}

// RefresherStore is what the Refresher reads and writes besides what its vault does.
type RefresherStore interface {
	TouchConnections(ctx context.Context, uses []store.ConnectionUse) error
	DueConnections(ctx context.Context, q store.DueQuery) ([]store.Connection, error)
}

// Refresher renews the tokens of connections in use before they expire, so an agent's
// exchange finds a live token and a refresh the service refuses is found (and reported) before
// an agent needs the connection (docs/connection-health.md). It runs on every replica: the row
// lock of each refresh (Vault.RefreshAhead) makes the replicas' passes cause one refresh per
// connection between them.
type Refresher struct {
	Vault *Vault
	Store RefresherStore
	// Config finds each connection's Connector; a connection whose Connector is no longer
	// declared for its Project is passed over.
	Config *config.Holder
	// Window, UsedWithin, Every and Workers: 0 means the Default of each.
	Window     time.Duration
	UsedWithin time.Duration
	Every      time.Duration
	Workers    int
	Log        logr.Logger
}

// Pass counts what one pass did.
type Pass struct {
	// Due counts the connections the pass looked at; Refreshed those renewed (or moved to
	// another state without a refresh); Failed those whose refresh failed.
	Due, Refreshed, Failed int
}

func (r *Refresher) window() time.Duration     { return cmpOr(r.Window, DefaultRefreshWindow) }
func (r *Refresher) usedWithin() time.Duration { return cmpOr(r.UsedWithin, DefaultUsedWithin) }
func (r *Refresher) every() time.Duration      { return cmpOr(r.Every, DefaultRefreshEvery) }

func cmpOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// NeedLeaderElection is false: every replica refreshes (the row lock keeps each refresh single).
func (r *Refresher) NeedLeaderElection() bool { return false }

// Start runs a pass after each jittered wait (the first one too, so replicas started together
// do not query together) until ctx ends. Refreshes already asked of a service finish (each
// bounded by the vault's timeout), so a rotated refresh token is never lost to a shutdown; no
// new one starts, and the uses not yet recorded are.
func (r *Refresher) Start(ctx context.Context) error {
	for {
		t := time.NewTimer(Jitter(r.every(), rand.Float64())) //nolint:gosec // a spread of waits, not a secret
		select {
		case <-ctx.Done():
			t.Stop()
			if err := r.recordUses(context.WithoutCancel(ctx)); err != nil {
				r.Log.Error(err, "recording which connections were used failed at shutdown")
			}
			return nil
		case <-t.C:
		}
		if _, err := r.RunOnce(ctx); err != nil && ctx.Err() == nil {
			r.Log.Error(err, "refreshing connections ahead of expiry failed; trying again at the next pass")
		}
	}
}

// Jitter is the wait before the next pass for a random x in [0, 1): between half and one and
// a half times every, so replicas started together do not query together.
func Jitter(every time.Duration, x float64) time.Duration {
	return every/2 + time.Duration(float64(every)*x)
}

// RunOnce records the vault's uses, then renews every connection due: active or expiring,
// expiring within the window, and either in use with a refresh token, or without one (its state
// then says so). At most Workers refreshes run at once. It returns when they have finished.
func (r *Refresher) RunOnce(ctx context.Context) (Pass, error) {
	var pass Pass
	if err := r.recordUses(ctx); err != nil {
		return pass, err
	}
	now := r.Vault.now()
	window := r.window()
	q := store.DueQuery{Before: now.Add(window), UsedSince: now.Add(-r.usedWithin()), Limit: dueBatch}
	workers := r.Workers
	if workers <= 0 {
		workers = DefaultRefreshWorkers
	}
	sem := make(chan struct{}, workers)
	var (
		wg sync.WaitGroup
		mu sync.Mutex
	)
pages:
	for ctx.Err() == nil {
		page, err := r.Store.DueConnections(ctx, q)
		if err != nil {
			wg.Wait()
			return pass, err
		}
		for _, conn := range page {
			if ctx.Err() != nil {
				break
			}
			if conn.RefreshToken == nil && conn.Status == store.ConnectionExpiring && fresh(conn, now) {
				continue // already says it; nothing to do until it expires
			}
			c := r.connector(conn)
			if c == nil {
				continue
			}
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				break pages
			}
			wg.Go(func() {
				defer func() { <-sem }()
				// A refresh asked of a service finishes even when the process is stopping: the
				// service may already have rotated the refresh token.
				err := r.Vault.RefreshAhead(context.WithoutCancel(ctx), c, conn.Project, conn.ID, window)
				mu.Lock()
				defer mu.Unlock()
				pass.Due++
				if err != nil {
					pass.Failed++
					r.Log.V(1).Info("a connection could not be refreshed ahead of expiry", "project", conn.Project,
						"connector", conn.Connector, "connection", conn.ID, "error", err.Error())
					return
				}
				pass.Refreshed++
			})
		}
		if len(page) < q.Limit {
			break
		}
		last := page[len(page)-1]
		q.AfterExpiry, q.AfterID = *last.Expiry, last.ID
	}
	wg.Wait()
	return pass, nil
}

// recordUses stores the uses the vault remembered.
func (r *Refresher) recordUses(ctx context.Context) error {
	us := r.Vault.TakeUses()
	if len(us) == 0 {
		return nil
	}
	if err := r.Store.TouchConnections(ctx, us); err != nil {
		r.Vault.KeepUses(us)
		return err
	}
	return nil
}

func (r *Refresher) connector(conn store.Connection) *config.Connector {
	if r.Config == nil {
		return nil
	}
	p := r.Config.Load().Project(conn.Project)
	if p == nil {
		return nil
	}
	return p.Connectors[conn.Connector]
}
