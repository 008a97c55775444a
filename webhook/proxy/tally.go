package proxy

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook/site"
)

// Tally counts proxied calls per person, agent and connector for the current minute, and
// writes each count as one audit record (events.TokenProxied) once the minute is over: an
// agent making a thousand calls a minute writes one record, not a thousand. The decision to
// let the agent use the person's connection is token exchange's, whose refusals are written
// one by one as they happen.
//
// Counts of a minute are written by the first call of a later minute, or by a timer set when
// the minute's first call arrives, whichever comes first. A replica that stops loses at most
// the counts of its current minute; Flush writes them on the way down.
type Tally struct {
	env *site.Env

	mu     sync.Mutex
	minute time.Time
	counts map[tallyKey]*tallyCount
	timer  *time.Timer
}

type tallyKey struct{ project, subject, agent, connector string }

type tallyCount struct {
	total   int
	classes [6]int // by status/100; 0 holds calls the service did not answer
	gateway int
}

// NewTally returns a tally writing through env.
func NewTally(env *site.Env) *Tally { return &Tally{env: env, counts: map[tallyKey]*tallyCount{}} }

// Gateway is the status Add is given for a call a gateway forwards after Envoy external
// authorization allowed it: Latchkey never sees the service's answer.
const Gateway = -1

// Add counts one call at now; status is the service's answer, 0 when there was none, Gateway
// for a call allowed at a gateway.
func (t *Tally) Add(ctx context.Context, project, subject, agent, connector string, status int, now time.Time) {
	minute := now.Truncate(time.Minute)
	t.mu.Lock()
	var done map[tallyKey]*tallyCount
	var doneMinute time.Time
	if !minute.Equal(t.minute) && len(t.counts) > 0 {
		done, doneMinute = t.counts, t.minute
		t.counts = map[tallyKey]*tallyCount{}
	}
	t.minute = minute
	k := tallyKey{project, subject, agent, connector}
	c := t.counts[k]
	if c == nil {
		c = &tallyCount{}
		t.counts[k] = c
		if t.timer == nil {
			// Wall time, not the injected clock: this only makes sure a quiet minute is
			// written soon after it ends; what it writes is decided by the injected clock.
			t.timer = time.AfterFunc(time.Until(minute.Add(time.Minute+time.Second)), t.tick)
		}
	}
	c.total++
	switch {
	case status == Gateway:
		c.gateway++
	case status >= 100 && status < 600:
		c.classes[status/100]++
	default:
		c.classes[0]++
	}
	t.mu.Unlock()
	t.write(context.WithoutCancel(ctx), doneMinute, done)
}

// tick writes the minute that ended, if the injected clock says it did.
func (t *Tally) tick() {
	t.mu.Lock()
	t.timer = nil
	t.mu.Unlock()
	t.flushBefore(context.Background(), t.env.Clock().Truncate(time.Minute))
}

// Flush writes every count, the current minute's too.
func (t *Tally) Flush(ctx context.Context) { t.flushBefore(ctx, time.Time{}) }

// flushBefore writes the counts if their minute is before cutoff (zero: whatever it is).
func (t *Tally) flushBefore(ctx context.Context, cutoff time.Time) {
	t.mu.Lock()
	if len(t.counts) == 0 || (!cutoff.IsZero() && !t.minute.Before(cutoff)) {
		t.mu.Unlock()
		return
	}
	done, minute := t.counts, t.minute
	t.counts = map[tallyKey]*tallyCount{}
	t.mu.Unlock()
	t.write(ctx, minute, done)
}

func (t *Tally) write(ctx context.Context, minute time.Time, counts map[tallyKey]*tallyCount) {
	for k, c := range counts {
		d := map[string]string{
			"agent": k.agent, "count": strconv.Itoa(c.total), "minute": minute.UTC().Format(time.RFC3339),
		}
		if c.gateway > 0 {
			d["gateway"] = strconv.Itoa(c.gateway)
		}
		for class, n := range c.classes {
			switch {
			case n == 0:
			case class == 0:
				d["no_answer"] = strconv.Itoa(n)
			default:
				d[fmt.Sprintf("status_%dxx", class)] = strconv.Itoa(n)
			}
		}
		t.env.Record(ctx, store.AuditRecord{
			Project: k.project, Time: minute, Actor: "client:" + k.agent, Action: events.TokenProxied,
			Target: k.subject, ClientID: k.agent, Connector: k.connector, Outcome: store.OutcomeSuccess, Details: d,
		})
	}
}
