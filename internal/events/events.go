// Package events turns security-relevant moments (a connect link opened by the wrong person, a
// retired refresh token presented again, a consent refused by policy, a callback that needed
// confirmation) into what an operator can watch and subscribe to:
//
//   - an audit record in the store (the source of truth; Kubernetes Events on the Project are
//     derived from it by a leader-elected tailer in controllers, so HTTP handlers never call the
//     Kubernetes API);
//   - the counter latchkey_security_events_total{type};
//   - one outbox row per event sink of the project, for this and every other audit record
//     (Deliverer relays each appended record to the outbox exactly once, whatever wrote it),
//     delivered as a CloudEvents 1.0 structured JSON POST signed the Standard Webhooks way,
//     retried with backoff until the sink takes it.
//
// Delivery is at least once: an event whose POST succeeded but whose success could not be
// recorded (a crash, a lost database connection) is sent again with the same CloudEvents id.
// Sinks deduplicate by id.
package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/requestid"
	"latchkey.dev/latchkey/internal/store"
)

// Security event types. Each is also the Action of the audit record that reports it (or the
// record's action is one of the aliases below), and the suffix of the CloudEvents type
// ("dev.latchkey." + type).
const (
	// LinkWrongPerson: a connect link was opened by someone signed in as another person than the
	// one it was made for (check 3 of a connect link, docs/connections-for-agents.md). Actor is who opened it, Subject whom it was for.
	LinkWrongPerson = "link.wrong_person"
	// RefreshReuse: a retired refresh token was presented again; the client's tokens for the
	// person were ended (docs/recognised-apps.md).
	RefreshReuse = "refresh.reuse"
	// ConsentRefusedByPolicy: the project's redirect policy refused a client at the consent step
	// ("Only recognised apps can connect", docs/recognised-apps.md).
	ConsentRefusedByPolicy = "consent.refused_by_policy"
	// CallbackConfirmation: an upstream callback arrived without the starting browser's binding
	// cookie and stopped at the confirmation page (docs/connectors-for-admins.md).
	CallbackConfirmation = "callback.confirmation"
	// CallbackOtherPerson: an upstream callback or its confirmation arrived in a browser signed
	// in to the project as another person than the one who started it, and was refused (an
	// authorization URL forwarded to a colleague, or someone else signing in where the person
	// started; docs/decisions/0017). Actor is who started it; details name both (owner,
	// signed_in).
	CallbackOtherPerson = "callback.other_person"
)

// Types lists every security event type, in a stable order.
func Types() []string {
	return []string{LinkWrongPerson, RefreshReuse, ConsentRefusedByPolicy, CallbackConfirmation, CallbackOtherPerson}
}

// aliases are audit actions other flows already write that report a security event under
// another name.
var aliases = map[string]string{
	// webhook/callback: a callback without the starting browser's cookie stopped at the
	// confirmation page.
	ConnectionConfirmationShown: CallbackConfirmation,
	// webhook/callback: a callback or confirmation in a browser signed in as another person
	// than the one who started it: refused, and the attempt ended.
	ConnectionWrongPerson: CallbackOtherPerson,
	// The same, under the name audit records had before it covered every way of finishing.
	"connection.refused_other_person": CallbackOtherPerson,
}

// TypeOf returns the security event type an audit action reports, if it reports one.
func TypeOf(action string) (string, bool) {
	if slices.Contains(Types(), action) {
		return action, true
	}
	t, ok := aliases[action]
	return t, ok
}

// IsSecurity reports whether an audit action is a security event.
func IsSecurity(action string) bool {
	_, ok := TypeOf(action)
	return ok
}

// CloudEventType is the CloudEvents type attribute of a security event type.
func CloudEventType(t string) string { return "dev.latchkey." + t }

// Event is one security event as a handler reports it.
type Event struct {
	// Type is one of the constants above.
	Type string
	// Actor is who did it: a person's id, "client:<id>", or "system".
	Actor string
	// Subject is whom or what it concerns (the person a link was for, a client id).
	Subject string
	// Details are short, non-secret facts (ids, names, counts); never tokens or codes.
	Details map[string]string
}

// EmitterStore is the part of the store the Emitter writes: the audit record and, in the
// outbox, one event per sink.
type EmitterStore interface {
	AppendAudit(ctx context.Context, r store.AuditRecord) error
	EnqueueEvents(ctx context.Context, events ...store.Event) error
}

// Emitter records security events. It is safe for concurrent use.
type Emitter struct {
	store  EmitterStore
	config *config.Holder
	now    func() time.Time
	log    logr.Logger
	total  *prometheus.CounterVec
}

// EmitterOptions configure an Emitter.
type EmitterOptions struct {
	Store EmitterStore
	// Config finds a project's event sinks for Recorded; Emit is given the project.
	Config *config.Holder
	// Now is the injected clock; time.Now when nil.
	Now    func() time.Time
	Logger logr.Logger
	// Registerer receives latchkey_security_events_total; prometheus.DefaultRegisterer when nil.
	// Registering twice on one registry reuses the first counter.
	Registerer prometheus.Registerer
}

// NewEmitter returns an Emitter.
func NewEmitter(o EmitterOptions) (*Emitter, error) {
	if o.Store == nil {
		return nil, errors.New("events: EmitterOptions.Store is required")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Registerer == nil {
		o.Registerer = prometheus.DefaultRegisterer
	}
	total := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "latchkey_security_events_total",
		Help: "Security events by type (link.wrong_person, refresh.reuse, consent.refused_by_policy, callback.confirmation).",
	}, []string{"type"})
	if err := o.Registerer.Register(total); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			return nil, fmt.Errorf("events: registering the counter: %w", err)
		}
		existing, ok := are.ExistingCollector.(*prometheus.CounterVec)
		if !ok {
			return nil, fmt.Errorf("events: latchkey_security_events_total is registered as another kind of collector")
		}
		total = existing
	}
	// Every type has a series from the start, so a rate() over it is 0 rather than absent.
	for _, t := range Types() {
		total.WithLabelValues(t)
	}
	return &Emitter{store: o.Store, config: o.Config, now: o.Now, log: o.Logger, total: total}, nil
}

// Counter is latchkey_security_events_total, for tests and dashboards.
func (e *Emitter) Counter() *prometheus.CounterVec { return e.total }

// Emit records a security event of project p: the audit record and the counter. The record
// reaches the project's event sinks like every other audit record (Deliverer relays it).
func (e *Emitter) Emit(ctx context.Context, p *config.Project, ev Event) error {
	typ, ok := TypeOf(ev.Type)
	if !ok {
		return fmt.Errorf("events: %q is not a security event type", ev.Type)
	}
	if p == nil {
		return errors.New("events: an event needs a project")
	}
	r := store.AuditRecord{
		Project: p.Key, Time: e.now(), Actor: ev.Actor, Action: ev.Type, Target: ev.Subject, Details: ev.Details,
	}
	Normalize(&r)
	if err := e.store.AppendAudit(ctx, r); err != nil {
		requestid.Logger(ctx, e.log).Error(err, "cannot append the audit record of a security event", "project", p.Key, "type", ev.Type)
		return err
	}
	e.total.WithLabelValues(typ).Inc()
	return nil
}

// Recorded counts an audit record that was already appended elsewhere (site.Env.Record) in
// latchkey_security_events_total if its action is a security event type. Delivery to the
// sinks needs nothing from here: Deliverer relays every appended record from the store.
func (e *Emitter) Recorded(_ context.Context, r store.AuditRecord) {
	if typ, ok := TypeOf(r.Action); ok {
		e.total.WithLabelValues(typ).Inc()
	}
}

// CloudEvent is the structured-mode JSON of one event (CloudEvents 1.0).
type CloudEvent struct {
	SpecVersion     string `json:"specversion"`
	ID              string `json:"id"`
	Source          string `json:"source"`
	Type            string `json:"type"`
	Subject         string `json:"subject,omitempty"`
	Time            string `json:"time"`
	DataContentType string `json:"datacontenttype"`
	Data            Data   `json:"data"`
}

// Data is the payload of every event: the audit record (docs/audit.md).
type Data struct {
	Project string            `json:"project"`
	Actor   string            `json:"actor,omitempty"`
	Subject string            `json:"subject,omitempty"`
	Details map[string]string `json:"details,omitempty"`
	// Action is the audit record's action as written (an older alias of the type, for some).
	Action    string `json:"action,omitempty"`
	Client    string `json:"client_id,omitempty"`
	Connector string `json:"connector,omitempty"`
	Outcome   string `json:"outcome,omitempty"`
	Reason    string `json:"reason,omitempty"`
	// AuditID is the record's id in the audit log, to find it there.
	AuditID int64 `json:"audit_id,omitempty"`
}

// Envelope is the CloudEvent body of event type typ, reported by audit record r, that is
// stored in the outbox and POSTed unchanged, so every attempt (and every replica) sends the
// same bytes. source is the project's issuer.
func Envelope(id string, p *config.Project, typ string, r store.AuditRecord) ([]byte, error) {
	return json.Marshal(CloudEvent{
		SpecVersion:     "1.0",
		ID:              id,
		Source:          p.Issuer,
		Type:            CloudEventType(typ),
		Subject:         r.Target,
		Time:            r.Time.UTC().Format(time.RFC3339Nano),
		DataContentType: "application/json",
		Data: Data{
			Project: p.Key, Actor: r.Actor, Subject: r.Target, Details: r.Details, Action: r.Action,
			Client: r.ClientID, Connector: r.Connector, Outcome: r.Outcome, Reason: r.Reason, AuditID: r.ID,
		},
	})
}
