package metrics

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"latchkey.dev/latchkey/internal/store"
)

// Store wraps s so that every operation's duration is observed in
// latchkey_store_operation_duration_seconds{operation, result}. The operation label is the
// method's name; result is ok, not_found, conflict or error. Operations that run a caller's
// function inside their transaction (UpdateConnection, UpdateClient, ConsumeCallbackState)
// include that function's time: for UpdateConnection that is the upstream refresh.
//
// With a nil *Metrics, s is returned unchanged.
func (m *Metrics) Store(s store.Store) store.Store {
	if m == nil || s == nil {
		return s
	}
	return &instrumented{Store: s, m: m}
}

// instrumented embeds the store so that a method added to store.Store later still works
// (uninstrumented) until it is added here; TestStoreCoversEveryMethod notices.
type instrumented struct {
	store.Store
	m *Metrics
}

func (x *instrumented) done(op string, start time.Time, err *error) {
	x.m.storeOps.WithLabelValues(op, result(*err)).Observe(time.Since(start).Seconds())
}

func result(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, store.ErrNotFound):
		return "not_found"
	case errors.Is(err, store.ErrConflict):
		return "conflict"
	default:
		return "error"
	}
}

func (x *instrumented) Close() (err error) {
	defer x.done("Close", time.Now(), &err)
	return x.Store.Close()
}

func (x *instrumented) Ping(ctx context.Context) (err error) {
	defer x.done("Ping", time.Now(), &err)
	return x.Store.Ping(ctx)
}

func (x *instrumented) GarbageCollect(ctx context.Context, now time.Time) (r0 store.GCResult, err error) {
	defer x.done("GarbageCollect", time.Now(), &err)
	return x.Store.GarbageCollect(ctx, now)
}

func (x *instrumented) UpsertPerson(ctx context.Context, p store.Person) (r0 store.Person, err error) {
	defer x.done("UpsertPerson", time.Now(), &err)
	return x.Store.UpsertPerson(ctx, p)
}

func (x *instrumented) GetPerson(ctx context.Context, project, id string) (r0 store.Person, err error) {
	defer x.done("GetPerson", time.Now(), &err)
	return x.Store.GetPerson(ctx, project, id)
}

func (x *instrumented) CreateSession(ctx context.Context, s store.Session) (err error) {
	defer x.done("CreateSession", time.Now(), &err)
	return x.Store.CreateSession(ctx, s)
}

func (x *instrumented) GetSession(ctx context.Context, idHash []byte, now time.Time) (r0 store.Session, err error) {
	defer x.done("GetSession", time.Now(), &err)
	return x.Store.GetSession(ctx, idHash, now)
}

func (x *instrumented) DeleteSession(ctx context.Context, idHash []byte) (err error) {
	defer x.done("DeleteSession", time.Now(), &err)
	return x.Store.DeleteSession(ctx, idHash)
}

func (x *instrumented) CreateClient(ctx context.Context, c store.Client) (err error) {
	defer x.done("CreateClient", time.Now(), &err)
	return x.Store.CreateClient(ctx, c)
}

func (x *instrumented) GetClient(ctx context.Context, project, id string) (r0 store.Client, err error) {
	defer x.done("GetClient", time.Now(), &err)
	return x.Store.GetClient(ctx, project, id)
}

func (x *instrumented) UpdateClient(ctx context.Context, project, id string, fn func(store.Client) (store.Client, error)) (r0 store.Client, err error) {
	defer x.done("UpdateClient", time.Now(), &err)
	return x.Store.UpdateClient(ctx, project, id, fn)
}

func (x *instrumented) DeleteClient(ctx context.Context, project, id string, now time.Time) (err error) {
	defer x.done("DeleteClient", time.Now(), &err)
	return x.Store.DeleteClient(ctx, project, id, now)
}

func (x *instrumented) ListClients(ctx context.Context, project string) (r0 []store.Client, err error) {
	defer x.done("ListClients", time.Now(), &err)
	return x.Store.ListClients(ctx, project)
}

func (x *instrumented) UpsertGrant(ctx context.Context, g store.Grant) (err error) {
	defer x.done("UpsertGrant", time.Now(), &err)
	return x.Store.UpsertGrant(ctx, g)
}

func (x *instrumented) GetGrant(ctx context.Context, project, subject, clientID string) (r0 store.Grant, err error) {
	defer x.done("GetGrant", time.Now(), &err)
	return x.Store.GetGrant(ctx, project, subject, clientID)
}

func (x *instrumented) ListGrants(ctx context.Context, project, subject string) (r0 []store.Grant, err error) {
	defer x.done("ListGrants", time.Now(), &err)
	return x.Store.ListGrants(ctx, project, subject)
}

func (x *instrumented) DeleteGrant(ctx context.Context, project, subject, clientID string, now time.Time) (err error) {
	defer x.done("DeleteGrant", time.Now(), &err)
	return x.Store.DeleteGrant(ctx, project, subject, clientID, now)
}

func (x *instrumented) CreateAuthCode(ctx context.Context, c store.AuthCode) (err error) {
	defer x.done("CreateAuthCode", time.Now(), &err)
	return x.Store.CreateAuthCode(ctx, c)
}

func (x *instrumented) RedeemAuthCode(ctx context.Context, hash []byte, now time.Time, check func(store.AuthCode) error) (r0 store.AuthCode, err error) {
	start := time.Now()
	// A code the caller's check refused (a wrong verifier) is the client's mistake, answered
	// correctly: counted as ok, not as a store error.
	refused := false
	if check != nil {
		inner := check
		check = func(c store.AuthCode) error {
			err := inner(c)
			refused = err != nil
			return err
		}
	}
	r0, err = x.Store.RedeemAuthCode(ctx, hash, now, check)
	counted := err
	if refused {
		counted = nil
	}
	x.done("RedeemAuthCode", start, &counted)
	return r0, err
}

func (x *instrumented) CreateTokens(ctx context.Context, tokens ...store.Token) (err error) {
	defer x.done("CreateTokens", time.Now(), &err)
	return x.Store.CreateTokens(ctx, tokens...)
}

func (x *instrumented) GetToken(ctx context.Context, hash []byte) (r0 store.Token, err error) {
	defer x.done("GetToken", time.Now(), &err)
	return x.Store.GetToken(ctx, hash)
}

func (x *instrumented) RotateRefreshToken(ctx context.Context, r store.RotateRequest) (r0 store.Rotation, err error) {
	defer x.done("RotateRefreshToken", time.Now(), &err)
	return x.Store.RotateRefreshToken(ctx, r)
}

func (x *instrumented) RevokeToken(ctx context.Context, hash []byte, now time.Time) (err error) {
	defer x.done("RevokeToken", time.Now(), &err)
	return x.Store.RevokeToken(ctx, hash, now)
}

func (x *instrumented) RevokeFamily(ctx context.Context, familyID string, now time.Time) (r0 int64, err error) {
	defer x.done("RevokeFamily", time.Now(), &err)
	return x.Store.RevokeFamily(ctx, familyID, now)
}

func (x *instrumented) RevokeByCode(ctx context.Context, codeHash []byte, now time.Time) (r0 int64, err error) {
	defer x.done("RevokeByCode", time.Now(), &err)
	return x.Store.RevokeByCode(ctx, codeHash, now)
}

func (x *instrumented) RevokeClientTokens(ctx context.Context, project string, clientIDs []string, now time.Time) (r0 map[string]int64, err error) {
	defer x.done("RevokeClientTokens", time.Now(), &err)
	return x.Store.RevokeClientTokens(ctx, project, clientIDs, now)
}

func (x *instrumented) CountLiveTokens(ctx context.Context, project string, now time.Time) (r0 map[string]int64, err error) {
	defer x.done("CountLiveTokens", time.Now(), &err)
	return x.Store.CountLiveTokens(ctx, project, now)
}

func (x *instrumented) SaveConnection(ctx context.Context, c store.Connection) (r0 store.Connection, err error) {
	defer x.done("SaveConnection", time.Now(), &err)
	return x.Store.SaveConnection(ctx, c)
}

func (x *instrumented) GetConnection(ctx context.Context, project, id string) (r0 store.Connection, err error) {
	defer x.done("GetConnection", time.Now(), &err)
	return x.Store.GetConnection(ctx, project, id)
}

func (x *instrumented) ListConnections(ctx context.Context, project, subject string) (r0 []store.Connection, err error) {
	defer x.done("ListConnections", time.Now(), &err)
	return x.Store.ListConnections(ctx, project, subject)
}

func (x *instrumented) AgentAccess(ctx context.Context, project, subject, connector, clientID string) (r0 store.AgentAccess, err error) {
	defer x.done("AgentAccess", time.Now(), &err)
	return x.Store.AgentAccess(ctx, project, subject, connector, clientID)
}

func (x *instrumented) UpdateConnection(ctx context.Context, project, id string, fn func(store.Connection) (store.Connection, error)) (r0 store.Connection, err error) {
	defer x.done("UpdateConnection", time.Now(), &err)
	return x.Store.UpdateConnection(ctx, project, id, fn)
}

func (x *instrumented) DeleteConnection(ctx context.Context, project, id string) (err error) {
	defer x.done("DeleteConnection", time.Now(), &err)
	return x.Store.DeleteConnection(ctx, project, id)
}

func (x *instrumented) AllowAgent(ctx context.Context, p store.AgentPermission) (err error) {
	defer x.done("AllowAgent", time.Now(), &err)
	return x.Store.AllowAgent(ctx, p)
}

func (x *instrumented) FindPermission(ctx context.Context, project, subject, connector, clientID string) (r0 store.AgentPermission, err error) {
	defer x.done("FindPermission", time.Now(), &err)
	return x.Store.FindPermission(ctx, project, subject, connector, clientID)
}

func (x *instrumented) ListPermissions(ctx context.Context, project, subject string) (r0 []store.AgentPermission, err error) {
	defer x.done("ListPermissions", time.Now(), &err)
	return x.Store.ListPermissions(ctx, project, subject)
}

func (x *instrumented) DeletePermission(ctx context.Context, project, subject, connector, clientID string) (err error) {
	defer x.done("DeletePermission", time.Now(), &err)
	return x.Store.DeletePermission(ctx, project, subject, connector, clientID)
}

func (x *instrumented) CreateCallbackState(ctx context.Context, s store.CallbackState) (err error) {
	defer x.done("CreateCallbackState", time.Now(), &err)
	return x.Store.CreateCallbackState(ctx, s)
}

func (x *instrumented) GetCallbackState(ctx context.Context, stateHash []byte, now time.Time) (r0 store.CallbackState, err error) {
	defer x.done("GetCallbackState", time.Now(), &err)
	return x.Store.GetCallbackState(ctx, stateHash, now)
}

func (x *instrumented) SetConfirmHash(ctx context.Context, stateHash, confirmHash []byte, now time.Time) (err error) {
	defer x.done("SetConfirmHash", time.Now(), &err)
	return x.Store.SetConfirmHash(ctx, stateHash, confirmHash, now)
}

func (x *instrumented) ConsumeCallbackState(ctx context.Context, stateHash []byte, now time.Time, check func(store.CallbackState) error) (r0 store.CallbackState, err error) {
	defer x.done("ConsumeCallbackState", time.Now(), &err)
	return x.Store.ConsumeCallbackState(ctx, stateHash, now, check)
}

func (x *instrumented) EndCallbackStates(ctx context.Context, project, subject string) (r0 int64, err error) {
	defer x.done("EndCallbackStates", time.Now(), &err)
	return x.Store.EndCallbackStates(ctx, project, subject)
}

func (x *instrumented) OpenLink(ctx context.Context, l store.Link, now time.Time) (r0 store.Link, r1 bool, err error) {
	defer x.done("OpenLink", time.Now(), &err)
	return x.Store.OpenLink(ctx, l, now)
}

func (x *instrumented) GetLinkByCode(ctx context.Context, codeHash []byte, now time.Time) (r0 store.Link, err error) {
	defer x.done("GetLinkByCode", time.Now(), &err)
	return x.Store.GetLinkByCode(ctx, codeHash, now)
}

func (x *instrumented) CloseLink(ctx context.Context, id string, state store.LinkState, now time.Time) (err error) {
	defer x.done("CloseLink", time.Now(), &err)
	return x.Store.CloseLink(ctx, id, state, now)
}

func (x *instrumented) GetLink(ctx context.Context, id string) (r0 store.Link, err error) {
	defer x.done("GetLink", time.Now(), &err)
	return x.Store.GetLink(ctx, id)
}

func (x *instrumented) AppendAudit(ctx context.Context, r store.AuditRecord) (err error) {
	defer x.done("AppendAudit", time.Now(), &err)
	return x.Store.AppendAudit(ctx, r)
}

func (x *instrumented) ListAudit(ctx context.Context, project string, limit int) (r0 []store.AuditRecord, err error) {
	defer x.done("ListAudit", time.Now(), &err)
	return x.Store.ListAudit(ctx, project, limit)
}

func (x *instrumented) ListAuditAfter(ctx context.Context, afterID int64, since time.Time, limit int) (r0 []store.AuditRecord, err error) {
	defer x.done("ListAuditAfter", time.Now(), &err)
	return x.Store.ListAuditAfter(ctx, afterID, since, limit)
}

func (x *instrumented) EnqueueEvents(ctx context.Context, events ...store.Event) (err error) {
	defer x.done("EnqueueEvents", time.Now(), &err)
	return x.Store.EnqueueEvents(ctx, events...)
}

func (x *instrumented) ClaimEvents(ctx context.Context, now time.Time, lease time.Duration, limit int) (r0 []store.Event, err error) {
	defer x.done("ClaimEvents", time.Now(), &err)
	return x.Store.ClaimEvents(ctx, now, lease, limit)
}

func (x *instrumented) MarkDelivered(ctx context.Context, id, sink string, now time.Time) (err error) {
	defer x.done("MarkDelivered", time.Now(), &err)
	return x.Store.MarkDelivered(ctx, id, sink, now)
}

func (x *instrumented) MarkFailed(ctx context.Context, id, sink string, next time.Time) (err error) {
	defer x.done("MarkFailed", time.Now(), &err)
	return x.Store.MarkFailed(ctx, id, sink, next)
}

func (x *instrumented) OutboxDepth(ctx context.Context) (r0 int64, err error) {
	defer x.done("OutboxDepth", time.Now(), &err)
	return x.Store.OutboxDepth(ctx)
}

// Outbox exports the depth of the event outbox (latchkey_event_outbox_depth) and whether the
// store answers (latchkey_store_up), both read from s when Prometheus scrapes, bounded by
// timeout (1s when zero). A scrape while the database is down reports store_up 0 and no depth.
func Outbox(reg prometheus.Registerer, s store.Store, timeout time.Duration) error {
	if reg == nil {
		reg = prometheus.DefaultRegisterer
	}
	if timeout <= 0 {
		timeout = time.Second
	}
	return reg.Register(&outbox{s: s, timeout: timeout})
}

var (
	outboxDepthDesc = prometheus.NewDesc("latchkey_event_outbox_depth",
		"Security events waiting in the outbox for delivery to event sinks.", nil, nil)
	storeUpDesc = prometheus.NewDesc("latchkey_store_up",
		"1 when the store answered the last scrape, 0 when it did not.", nil, nil)
)

type outbox struct {
	s       store.Store
	timeout time.Duration
}

func (o *outbox) Describe(ch chan<- *prometheus.Desc) {
	ch <- outboxDepthDesc
	ch <- storeUpDesc
}

func (o *outbox) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	n, err := o.s.OutboxDepth(ctx)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(storeUpDesc, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(storeUpDesc, prometheus.GaugeValue, 1)
	ch <- prometheus.MustNewConstMetric(outboxDepthDesc, prometheus.GaugeValue, float64(n))
}
