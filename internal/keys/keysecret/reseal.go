package keysecret

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"

	"latchkey.dev/latchkey/internal/keys"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/upstream"
)

// Resealer re-seals the connections' upstream tokens with the primary sealing key, on the
// elected replica, a page at a time with a pause between pages so it never competes with
// requests for the database. Its progress is recorded in the keys Secret after every page (the
// state, and the latchkey.dev/reseal annotation admins read), so a new leader resumes where the
// last one stopped.
//
// Connect links and callback states are sealed too but live minutes; they are not rewritten,
// they expire. The report lists what each other key still seals, so an admin knows when an old
// key may be removed: when it seals nothing.
type Resealer struct {
	Store keys.ResealStore
	// Batch is the page size (default 100); Pause the wait between pages (default 200ms).
	Batch int
	Pause time.Duration
	Log   logr.Logger
}

// Run re-seals until every connection is sealed with set's primary key, or ctx ends. When a
// newer sealing key took over meanwhile it stops: the next round re-seals with that one.
func (r *Resealer) Run(ctx context.Context, k *Keeper, set *keys.Set) error {
	err := r.run(ctx, k, set)
	if errors.Is(err, errResealSuperseded) {
		r.Log.Info("a newer sealing key took over; re-sealing continues with it")
		return nil
	}
	return err
}

func (r *Resealer) run(ctx context.Context, k *Keeper, set *keys.Set) error {
	batch, pause := r.Batch, r.Pause
	if batch <= 0 {
		batch = 100
	}
	if pause <= 0 {
		pause = 200 * time.Millisecond
	}
	rs := *set.State.Reseal
	kr, err := secret.NewKeyring(set.Sealing, rs.To)
	if err != nil {
		return err
	}
	vault := &upstream.Vault{Store: r.Store, Keyring: kr, Now: k.Now}
	r.Log.Info("re-sealing stored upstream tokens", "to", rs.To, "resumingAfter", rs.After != "", "resealed", rs.Resealed)

	// A replica whose clock ran behind may have sealed a row with the old key just after the
	// switch, behind the cursor: a pass that re-sealed anything is followed by another.
	for pass := 0; ; pass++ {
		resealed := int64(0)
		rs.Unreadable = 0
		for {
			page, err := r.Store.ConnectionsSealedWithout(ctx, rs.To, rs.After, batch)
			if err != nil {
				return err
			}
			if len(page) == 0 {
				break
			}
			for _, c := range page {
				done, err := vault.Reseal(ctx, c.Project, c.ID)
				switch {
				case errors.Is(err, secret.ErrUnknownKey) || errors.Is(err, secret.ErrOpen):
					// A key removed too early, or a damaged row: nothing can open it. The
					// person reconnects when they next need it.
					rs.Unreadable++
					r.Log.Info("a connection no key opens is left as it is", "project", c.Project, "connection", c.ID, "keyID", c.KeyID)
				case err != nil:
					return err
				case done:
					rs.Resealed++
					resealed++
				}
				rs.After = c.ID
			}
			if err := k.writeState(ctx, rs, fmt.Sprintf("running: %d connections re-sealed with key %s so far", rs.Resealed, rs.To)); err != nil {
				return err
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(pause):
			}
		}
		rs.After = ""
		if resealed == 0 || pass >= 2 {
			break
		}
	}
	counts, err := r.Store.SealedValueCounts(ctx)
	if err != nil {
		return err
	}
	rs.DoneAt = k.Now()
	note := fmt.Sprintf("done: %d connections re-sealed with key %s; %s", rs.Resealed, rs.To, others(counts, rs.To))
	if rs.Unreadable > 0 {
		note += fmt.Sprintf("; %d connections no key opens (their people must reconnect)", rs.Unreadable)
	}
	if err := k.writeState(ctx, rs, note); err != nil {
		return err
	}
	r.Log.Info("re-seal done", "to", rs.To, "resealed", rs.Resealed, "unreadable", rs.Unreadable, "stillSealedWith", counts)
	return nil
}

// others says what keys other than primary still seal.
func others(counts map[string]int64, primary string) string {
	var parts []string
	for _, id := range slices.Sorted(maps.Keys(counts)) {
		if id != primary && counts[id] > 0 {
			parts = append(parts, fmt.Sprintf("%s seals %d", id, counts[id]))
		}
	}
	if len(parts) == 0 {
		return "no other key seals anything stored"
	}
	return "other keys still seal short-lived values that expire: " + strings.Join(parts, ", ")
}
