package events

import (
	"slices"
	"strings"

	"latchkey.dev/latchkey/internal/store"
)

// Audit actions written by the HTTP server's flows, besides the security event types above and
// the actions their packages name themselves (webhook/callback's connection.*). docs/audit.md
// describes each: when it is written, its actor and subject, its outcome and reason codes.
const (
	SignInSucceeded      = "signin.succeeded"
	SignInFailed         = "signin.failed"
	SignedOut            = "session.signed_out"
	ConsentGranted       = "consent.granted"
	ConsentDenied        = "consent.denied"
	TokenIssued          = "token.issued"
	TokenExchanged       = "token.exchanged"
	TokenExchangeRefused = "token.exchange_refused"
	TokenRevoked         = "token.revoked"
	// ClientAuthFailed: a request to the token, revocation, introspection or pushed
	// authorization request endpoint whose client could not be authenticated (invalid_client);
	// actor and subject the client id it claimed, unverified.
	ClientAuthFailed = "client.authentication_failed"
	// DPoPProofRefused: a token request whose DPoP proof was refused (invalid_dpop_proof):
	// replayed, malformed or missing where required; actor and subject the client.
	DPoPProofRefused = "dpop.proof_refused"
	LinkOpened       = "link.opened"
	// ConnectionRefreshFailed: a refresh of a person's connection failed (or was impossible)
	// and its state changed: to expiring, needs_reconnect or revoked_upstream; actor "system",
	// subject the person (docs/connection-health.md).
	ConnectionRefreshFailed = "connection.refresh_failed"
	// ConnectionRecovered: a refresh worked again for a connection that was expiring; actor
	// "system", subject the person.
	ConnectionRecovered = "connection.recovered"
	// ConnectionDefaultSet: the person made one of their accounts at a connector the default
	// (docs/several-accounts.md); details name the connector and the account.
	ConnectionDefaultSet = "connection.default_set"
	// PolicyChanged is written by the controllers when a Project's or a RedirectPolicy's
	// compiled policy changes (docs/audit.md).
	PolicyChanged = "policy.changed"

	// BackchannelLogout: the identity provider ended a person's sign-ins with an OpenID Connect
	// back-channel logout token; actor "system", subject the person (one record per person).
	BackchannelLogout = "session.backchannel_logout"
	// BackchannelLogoutRefused: a logout token verified but broke a rule (or was replayed);
	// actor "system", subject the provider's issuer.
	BackchannelLogoutRefused = "session.backchannel_logout_refused"
	// RecheckFailed: re-checking a person with the identity provider (at a refresh) refused
	// them, or could not be done for lack of a provider token; their access ended or was held.
	RecheckFailed = "person.recheck_failed"
	// RecheckUnavailable: the identity provider could not be reached to re-check a person.
	RecheckUnavailable = "person.recheck_unavailable"
	// IDJAGRedeemed, IDJAGRefused, IDJAGIssued: an Identity Assertion JWT Authorization Grant
	// was redeemed at /token, refused there, or issued by token exchange (docs/audit.md).
	IDJAGRedeemed = "idjag.redeemed"
	IDJAGRefused  = "idjag.refused"
	IDJAGIssued   = "idjag.issued"
	// PasskeyAdded, PasskeyRemoved: a person enrolled or removed a passkey on the account page;
	// actor and subject the person, details.credential_id the credential (docs/passkeys.md).
	PasskeyAdded   = "passkey.added"
	PasskeyRemoved = "passkey.removed"
	// Admin API actions (webhook/admin): actor "kubernetes:<username>", the user the
	// Kubernetes API server authenticated; always a success (a refused request writes nothing).
	AdminAccessEnded         = "admin.person.access_ended"
	AdminGrantRevoked        = "admin.grant.revoked"
	AdminConnectionEnded     = "admin.connection.disconnected"
	AdminClientTokensRevoked = "admin.client_tokens.revoked"
	// AdminPasskeyRemoved: an administrator removed one of a person's passkeys; target the
	// person, details.credential_id the credential (docs/admin.md).
	AdminPasskeyRemoved = "admin.passkey.removed"

	// Organisation-shared connections (docs/shared-connections.md).

	// SharedTokenExchanged: token exchange handed an agent the token of a shared account; the
	// subject is the person whose agent used it, details.shared_account the account.
	SharedTokenExchanged = "token.exchanged_shared"
	// AdminSharedConnectionStarted: an administrator asked for a start URL; actor
	// "kubernetes:<username>", details.start names it.
	AdminSharedConnectionStarted = "admin.shared_connection.started"
	// AdminSharedConnectionDisconnected: an administrator disconnected a shared account
	// (revoked at the service where it can be); details.account the account.
	AdminSharedConnectionDisconnected = "admin.shared_connection.disconnected"
	// SharedConnectionOpened: a start URL was opened and sent its browser to the service; actor
	// the administrator who asked for it, details.start the start.
	SharedConnectionOpened = "shared_connection.opened"
	// SharedConnectionSaved: the service's callback saved the shared account, in the browser
	// that opened the start URL; details.replaced names an account it replaced.
	SharedConnectionSaved = "shared_connection.saved"
	// SharedConnectionRefused: a start URL that was used, expired or never existed, or a shared
	// connection's callback in another browser than the one that opened the start URL; nothing
	// was saved.
	SharedConnectionRefused = "shared_connection.refused"
)

// WrittenBehind reports whether records of action are queued (store.Audit.QueueAudit) rather
// than written before the request is answered: the records every token request writes, where a
// write in the request would cost more than the request itself, and failed client
// authentications, which someone guessing secrets can send as fast (docs/decisions/0047). The token
// an issuance record describes is stored before the answer all the same. Security events and
// every other action are written before the answer.
func WrittenBehind(action string) bool {
	switch action {
	case TokenIssued, TokenExchangeRefused, TokenProxyRefused, ClientAuthFailed, DPoPProofRefused:
		return true
	}
	return false
}

// Handout reports whether records of action describe something a client was handed that
// Latchkey keeps no other trace of: a person's upstream token (token.exchanged) or an ID-JAG
// (idjag.issued). They are stored before the answer leaves, in the batches of the records
// written behind (store.Audit.AppendAuditBatched), and a request whose record cannot be stored
// fails instead of handing the token out (docs/decisions/0054).
func Handout(action string) bool {
	return action == TokenExchanged || action == IDJAGIssued || action == SharedTokenExchanged
}

// Families are action prefixes written by parts of Latchkey that name their own actions: the
// admin API ("admin.person.access_ended", actor "kubernetes:<username>") and sessions ended
// from outside a browser ("session.backchannel_logout"). Every action in a family reaches the
// sinks like any other; in metrics an action not listed in AuditTypes counts as
// "<family>.other".
var Families = []string{"admin", "session"}

// auditTypes lists every action the audit log holds, with the outcome a record of it has when
// its writer did not say. Aliases (older names of security events) are not listed; they count
// as the type they report.
var auditTypes = []struct {
	action  string
	outcome string
}{
	{SignInSucceeded, store.OutcomeSuccess},
	{SignInFailed, store.OutcomeRefused},
	{SignedOut, store.OutcomeSuccess},
	{ConsentGranted, store.OutcomeSuccess},
	{ConsentDenied, store.OutcomeRefused},
	{ConsentRefusedByPolicy, store.OutcomeRefused},
	{TokenIssued, store.OutcomeSuccess},
	{CodeReplay, store.OutcomeRefused},
	{RefreshReuse, store.OutcomeRefused},
	{RefreshRefused, store.OutcomeRefused},
	{TokenExchanged, store.OutcomeSuccess},
	{TokenExchangeRefused, store.OutcomeRefused},
	{TokenProxied, store.OutcomeSuccess},
	{TokenProxyRefused, store.OutcomeRefused},
	{TokenRevoked, store.OutcomeSuccess},
	{ClientAuthFailed, store.OutcomeRefused},
	{DPoPProofRefused, store.OutcomeRefused},
	{GrantRevoked, store.OutcomeSuccess},
	{PermissionRemoved, store.OutcomeSuccess},
	{ConnectionDisconnected, store.OutcomeSuccess},
	{ConnectionDefaultSet, store.OutcomeSuccess},
	{LinkCreated, store.OutcomeSuccess},
	{LinkOpened, store.OutcomeSuccess},
	{LinkWrongPerson, store.OutcomeRefused},
	{LinkDeclined, store.OutcomeRefused},
	{AgentAllowed, store.OutcomeSuccess},
	{ConnectionStarted, store.OutcomeSuccess},
	{ConnectionSaved, store.OutcomeSuccess},
	{ConnectionConfirmed, store.OutcomeSuccess},
	{CallbackConfirmation, store.OutcomeRefused},
	{ConnectionConfirmationRefused, store.OutcomeRefused},
	{CallbackOtherPerson, store.OutcomeRefused},
	{ConnectionFailed, store.OutcomeFailed},
	{ConnectionCancelled, store.OutcomeRefused},
	{ConnectionEndedBySignOut, store.OutcomeSuccess},
	{ConnectionRefreshFailed, store.OutcomeFailed},
	{ConnectionRecovered, store.OutcomeSuccess},
	{ClientRegistered, store.OutcomeSuccess},
	{ClientUpdated, store.OutcomeSuccess},
	{ClientDeleted, store.OutcomeSuccess},
	{PolicyChanged, store.OutcomeSuccess},
	{BackchannelLogout, store.OutcomeSuccess},
	{BackchannelLogoutRefused, store.OutcomeRefused},
	{RecheckFailed, store.OutcomeRefused},
	{RecheckUnavailable, store.OutcomeFailed},
	{IDJAGRedeemed, store.OutcomeSuccess},
	{IDJAGRefused, store.OutcomeRefused},
	{IDJAGIssued, store.OutcomeSuccess},
	{PasskeyAdded, store.OutcomeSuccess},
	{PasskeyRemoved, store.OutcomeSuccess},
	{AdminAccessEnded, store.OutcomeSuccess},
	{AdminGrantRevoked, store.OutcomeSuccess},
	{AdminConnectionEnded, store.OutcomeSuccess},
	{AdminClientTokensRevoked, store.OutcomeSuccess},
	{AdminPasskeyRemoved, store.OutcomeSuccess},
	{SharedTokenExchanged, store.OutcomeSuccess},
	{AdminSharedConnectionStarted, store.OutcomeSuccess},
	{AdminSharedConnectionDisconnected, store.OutcomeSuccess},
	{SharedConnectionOpened, store.OutcomeSuccess},
	{SharedConnectionSaved, store.OutcomeSuccess},
	{SharedConnectionRefused, store.OutcomeRefused},
	{ApprovalRequested, store.OutcomeSuccess},
	{ApprovalApproved, store.OutcomeSuccess},
	{ApprovalDenied, store.OutcomeRefused},
	{ApprovalBlocked, store.OutcomeSuccess},
	{ApprovalUnblocked, store.OutcomeSuccess},
	{AccessDeniedByPolicy, store.OutcomeRefused},
}

// AuditTypes lists every audit type in a stable order: the CloudEvents types sinks receive
// ("dev.latchkey." + type) and the values of latchkey_audit_records_total's type label, with
// "<family>.other" for each family and "other".
func AuditTypes() []string {
	out := make([]string, 0, len(auditTypes))
	for _, t := range auditTypes {
		out = append(out, t.action)
	}
	return out
}

// AuditType is the type an action is reported as: the security event type of an alias, the
// action itself otherwise. Sinks receive "dev.latchkey." + AuditType(action).
func AuditType(action string) string {
	if t, ok := aliases[action]; ok {
		return t
	}
	return action
}

// metricType is the bounded label value of an action: a listed type, "<family>.other", or
// "other". Actions are constants in code, but a label must never grow with what is written.
func metricType(action string) string {
	t := AuditType(action)
	if slices.ContainsFunc(auditTypes, func(a struct{ action, outcome string }) bool { return a.action == t }) {
		return t
	}
	if fam, _, ok := strings.Cut(t, "."); ok && slices.Contains(Families, fam) {
		return fam + ".other"
	}
	return "other"
}

func metricOutcome(o string) string {
	switch o {
	case store.OutcomeSuccess, store.OutcomeRefused, store.OutcomeFailed:
		return o
	}
	return "unknown"
}

// Normalize fills what a record's writer may leave out: the outcome its action has by default,
// and the client and Connector from the details that name them (client_id, connector), so
// records written before these fields existed read the same as new ones.
func Normalize(r *store.AuditRecord) {
	if r.Outcome == "" {
		t := AuditType(r.Action)
		for _, a := range auditTypes {
			if a.action == t {
				r.Outcome = a.outcome
				break
			}
		}
	}
	if r.ClientID == "" {
		if c := r.Details["client_id"]; c != "" {
			r.ClientID = c
		} else if c, ok := strings.CutPrefix(r.Target, "client:"); ok {
			r.ClientID = c
		} else if c, ok := strings.CutPrefix(r.Actor, "client:"); ok {
			r.ClientID = c
		}
	}
	if r.Connector == "" {
		if c := r.Details["connector"]; c != "" {
			r.Connector = c
		} else if c, ok := strings.CutPrefix(r.Target, "connector:"); ok {
			r.Connector = c
		}
	}
	if r.Reason == "" && r.Outcome != store.OutcomeSuccess {
		// Codes only: free-text reasons stay in details.
		if c := r.Details["reason"]; c != "" && isCode(c) {
			r.Reason = c
		}
	}
}

// isCode reports whether s looks like a reason code (lower-case letters, digits, underscores).
func isCode(s string) bool {
	if len(s) > 64 {
		return false
	}
	for _, c := range s {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
			return false
		}
	}
	return true
}
