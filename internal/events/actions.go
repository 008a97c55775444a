package events

// Audit actions written by the HTTP server's flows that report no security event of their own.
// Every action a flow writes is a constant of this package, so the catalog (auditTypes) and
// docs/audit.md, which TestEveryAuditTypeIsDocumented checks against each other, list them all.
const (
	// CodeReplay: an authorization code was presented again; what it issued was revoked.
	CodeReplay = "code.replay"
	// RefreshRefused: a refresh was refused and its family revoked, or a DPoP-bound refresh
	// token came without a proof by its key.
	RefreshRefused = "refresh.refused"
	// GrantRevoked: a person revoked an app on the account page (store.Apps.RevokeApp).
	GrantRevoked = "grant.revoked"
	// PermissionRemoved: a person removed an agent's access to their accounts.
	PermissionRemoved = "permission.removed"
	// ConnectionDisconnected: a person disconnected one of their accounts.
	ConnectionDisconnected = "connection.disconnected"
	// TokenProxied: an agent's calls through the token proxy or Envoy external authorization
	// (docs/token-proxy.md), counted per person, agent and connector for one minute and written
	// as one record: details.count, details.minute and the upstream answers by status class.
	TokenProxied = "token.proxied"
	// TokenProxyRefused: token exchange's decision refused a call through the token proxy or
	// Envoy external authorization (connect_required, allow_required, reconnect_required, the
	// client not permitted, a policy...); reasons as token.exchange_refused's. Written behind,
	// one per refused call.
	TokenProxyRefused = "token.proxy_refused"
	// LinkCreated: a token-exchange refusal made a new connect link.
	LinkCreated = "link.created"
	// LinkDeclined: the person declined a connect link.
	LinkDeclined = "link.declined"
	// AgentAllowed: the person let an agent use a connection.
	AgentAllowed = "agent.allowed"
	// ConnectionConfirmed: a connection finished through the callback's confirmation page.
	ConnectionConfirmed = "connection.confirmed"
	// ConnectionConfirmationRefused: a confirmation with a wrong or stale token.
	ConnectionConfirmationRefused = "connection.confirmation_refused"
	// ConnectionCancelled: the person cancelled at the service.
	ConnectionCancelled = "connection.cancelled"
	// ConnectionEndedBySignOut: signing out ended the person's pending connection attempts.
	ConnectionEndedBySignOut = "connection.ended_by_sign_out"
	// ConnectionConfirmationShown is what the callback writes for CallbackConfirmation.
	ConnectionConfirmationShown = "connection.confirmation_shown"
	// ConnectionWrongPerson is what the callback writes for CallbackOtherPerson.
	ConnectionWrongPerson = "connection.wrong_person"
	// ClientRegistered, ClientUpdated, ClientDeleted: dynamic client registration (RFC 7591,
	// RFC 7592).
	ClientRegistered = "client.registered"
	ClientUpdated    = "client.updated"
	ClientDeleted    = "client.deleted"
	// ApprovalRequested: an agent asked a person to approve a request (docs/approvals.md);
	// details.url is the person's approvals page, for a bridge that notifies them.
	ApprovalRequested = "approval.requested"
	// ApprovalApproved, ApprovalDenied: the person answered on the approvals page.
	ApprovalApproved = "approval.approved"
	ApprovalDenied   = "approval.denied"
	// ApprovalBlocked, ApprovalUnblocked: the person stopped an agent from asking, or let it
	// ask again.
	ApprovalBlocked   = "approval.blocked"
	ApprovalUnblocked = "approval.unblocked"
	// AccessDeniedByPolicy: a Project's AccessPolicies or its decision point refused a consent,
	// a token or a token exchange (details.action, details.policy: what denied; docs/policy.md).
	AccessDeniedByPolicy = "access.denied_by_policy"
)
