package events

import (
	"context"
	"sort"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

// Summary counts the security events of one type in one project seen by one Tail.Next call.
type Summary struct {
	Project string
	Type    string
	Count   int
	First   time.Time
	Last    time.Time
	// LastActor is the actor of the latest event, for the message an operator reads first.
	LastActor string
}

// AuditReader is the part of the store a Tail reads.
type AuditReader interface {
	ListAuditAfter(ctx context.Context, afterID int64, since time.Time, limit int) ([]store.AuditRecord, error)
}

// Tail reads the security events appended to the audit log since its previous call, across
// every project, and sums them up by project and type. It remembers the last record id it saw,
// so each record is counted once per Tail. It is not safe for concurrent use.
type Tail struct {
	Store AuditReader
	// Lookback is how far back the first call reaches; later calls continue from the last
	// record seen. Default 10 minutes.
	Lookback time.Duration
	// Page is how many records one store call returns; default 500.
	Page int
	// MaxPages bounds one call's work; records beyond it are read by the next call. Default 20.
	MaxPages int

	last int64
}

// Next returns the summaries of records appended since the previous call, sorted by project
// then type.
func (t *Tail) Next(ctx context.Context, now time.Time) ([]Summary, error) {
	lookback, page, maxPages := t.Lookback, t.Page, t.MaxPages
	if lookback <= 0 {
		lookback = 10 * time.Minute
	}
	if page <= 0 {
		page = 500
	}
	if maxPages <= 0 {
		maxPages = 20
	}
	// Until a first record is seen, the window is the last Lookback: history before this Tail
	// existed is not news, and reading it all would cost a full scan of the audit log.
	var since time.Time
	if t.last == 0 {
		since = now.Add(-lookback)
	}
	type key struct{ project, typ string }
	sums := map[key]*Summary{}
	for range maxPages {
		recs, err := t.Store.ListAuditAfter(ctx, t.last, since, page)
		if err != nil {
			return nil, err
		}
		for _, r := range recs {
			t.last = max(t.last, r.ID)
			typ, ok := TypeOf(r.Action)
			if !ok {
				continue
			}
			k := key{r.Project, typ}
			s := sums[k]
			if s == nil {
				s = &Summary{Project: r.Project, Type: typ, First: r.Time}
				sums[k] = s
			}
			s.Count++
			if !r.Time.Before(s.Last) {
				s.Last, s.LastActor = r.Time, r.Actor
			}
		}
		if len(recs) < page {
			break
		}
	}
	out := make([]Summary, 0, len(sums))
	for _, s := range sums {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Project != out[j].Project {
			return out[i].Project < out[j].Project
		}
		return out[i].Type < out[j].Type
	})
	return out, nil
}
