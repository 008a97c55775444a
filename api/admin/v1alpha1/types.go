// Package v1alpha1 holds the objects of the admin API, admin.latchkey.dev/v1alpha1: read-only
// views of Latchkey's runtime state (people, their consents, connected accounts, passkeys, open
// connect links, live tokens per client, audit records) that the latchkey server serves as an
// aggregated Kubernetes API, so that kubectl and Kubernetes RBAC reach them
// (docs/admin.md, docs/decisions/0029-admin-api-is-an-aggregated-api.md).
//
// They are not stored in etcd and cannot be created or updated; deleting one ends the access
// it describes. Every object lives in the namespace of its Project and carries the labels
// ProjectLabel and (where it belongs to a person) PersonLabel.
//
// They are not custom resources: controller-gen is told to skip the package (no CRDs, no
// deepcopy).
//
// +kubebuilder:skip
package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

const (
	// Group and Version of the admin API.
	Group   = "admin.latchkey.dev"
	Version = "v1alpha1"
	// GroupVersion is the apiVersion of every object.
	GroupVersion = Group + "/" + Version

	// ProjectLabel names the object's Project (within the object's namespace).
	ProjectLabel = "latchkey.dev/project"
	// PersonLabel names the person (Person's name) the object belongs to.
	PersonLabel = "latchkey.dev/person"
)

// Resource names, as kubectl and RBAC rules spell them.
const (
	ResourcePeople       = "people"
	ResourceGrants       = "grants"
	ResourceConnections  = "connections"
	ResourceLinks        = "links"
	ResourceClientTokens = "clienttokens"
	ResourceAuditRecords = "auditrecords"
	ResourcePasskeys     = "passkeys"
)

// Person is someone who signs in to a Project. Its name is Latchkey's subject identifier for
// them. Deleting it ends the person's access: sessions, consents, tokens, connected accounts,
// open links; the person may sign in again if their sign-in source still admits them.
type Person struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// Project is the Project's name in this namespace.
	Project string `json:"project"`
	Email   string `json:"email,omitempty"`
	// DisplayName is how the sign-in source names the person.
	DisplayName string `json:"displayName,omitempty"`
	// Source is how the person signs in: "password" or "oidc".
	Source string `json:"source"`
	// LastSignIn is when the person last signed in.
	LastSignIn *metav1.Time `json:"lastSignIn,omitempty"`
	// ActiveSessions counts the person's browser sessions that have not expired.
	ActiveSessions int64 `json:"activeSessions"`
	// AccessEndedAt is when the person's access was last ended: by an administrator, a
	// back-channel logout or a failed re-check.
	AccessEndedAt *metav1.Time `json:"accessEndedAt,omitempty"`
}

// Grant is a person's consent to a client (an agent or app). Its name is
// "<person>.<client>" (see ClientName). Deleting it withdraws the consent and revokes the
// client's tokens for the person.
type Grant struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Project           string `json:"project"`
	Person            string `json:"person"`
	ClientID          string `json:"clientID"`
	// ClientDisplayName is the client's name as registered or declared.
	ClientDisplayName string      `json:"clientDisplayName,omitempty"`
	Scopes            []string    `json:"scopes,omitempty"`
	UpdatedAt         metav1.Time `json:"updatedAt"`
	// LiveTokens counts the client's unexpired, unrevoked tokens for the person.
	LiveTokens int64 `json:"liveTokens"`
}

// Connection is a person's account at a connected service. Its name is the connection's id.
// Deleting it disconnects the account (revoking it at the service where the Connector
// declares a revocation endpoint).
type Connection struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Project           string `json:"project"`
	Person            string `json:"person"`
	// Connector is the Connector's "namespace/name".
	Connector string `json:"connector"`
	// Account is how the service names the account (for GitHub, the login).
	Account   string `json:"account"`
	AccountID string `json:"accountID"`
	// State is the connection's state (docs/connection-health.md): "active"; "expiring" (its
	// token still works but expires soon and Latchkey cannot renew it now); "needs_reconnect"
	// (its token expired with nothing to renew it); or "revoked_upstream" (the service refused
	// the refresh: access was revoked there). The last two need the person to reconnect.
	State     string      `json:"state"`
	Scopes    []string    `json:"scopes,omitempty"`
	UpdatedAt metav1.Time `json:"updatedAt"`
	// Actors are the agents that received the connection's token for the person
	// (docs/delegation.md), the latest first.
	Actors []ConnectionActor `json:"actors,omitempty"`
}

// ConnectionActor is an agent that acted for a connection's person: it received the
// connection's token by token exchange, with the person's token issued to it or, through the
// agents Via, to the first of them.
type ConnectionActor struct {
	ClientID          string `json:"clientID"`
	ClientDisplayName string `json:"clientDisplayName,omitempty"`
	// Via lists the agents it acted through, the latest first; empty when the person's token
	// was issued to it.
	Via      []string    `json:"via,omitempty"`
	LastUsed metav1.Time `json:"lastUsed"`
}

// Link is an open connect link: the URL an agent was given for a person to connect, allow or
// reconnect a service. Its name is the link's connect_id.
type Link struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Project           string `json:"project"`
	Person            string `json:"person"`
	ClientID          string `json:"clientID"`
	Connector         string `json:"connector"`
	// Kind is "connect", "allow" or "reconnect".
	Kind      string      `json:"kind"`
	ExpiresAt metav1.Time `json:"expiresAt"`
}

// ClientTokens counts the live tokens one client holds in a Project. Its name is the client
// (see ClientName). Deleting it revokes every one of them.
type ClientTokens struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Project           string `json:"project"`
	ClientID          string `json:"clientID"`
	ClientDisplayName string `json:"clientDisplayName,omitempty"`
	LiveTokens        int64  `json:"liveTokens"`
}

// Passkey is a person's passkey (a WebAuthn credential; docs/passkeys.md). Its name is the
// credential ID in unpadded base64url. Deleting it removes the passkey: it no longer signs the
// person in, and sessions it made are not ended (end the person's access for that).
type Passkey struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Project           string `json:"project"`
	Person            string `json:"person"`
	// DisplayName is the passkey's name on the person's account page ("Passkey 1").
	DisplayName string `json:"displayName,omitempty"`
	// Synced is true for a passkey that can be copied to the person's other devices (backup
	// eligible), false for one bound to its device or security key.
	Synced bool `json:"synced"`
	// AAGUID names the authenticator's model, when it said (a UUID); empty or all zeros when not.
	AAGUID     string       `json:"aaguid,omitempty"`
	Transports []string     `json:"transports,omitempty"`
	LastUsed   *metav1.Time `json:"lastUsed,omitempty"`
}

// AuditRecord is one entry of a Project's audit log (docs/audit.md). Its name is its id,
// which increases with time.
type AuditRecord struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Project           string      `json:"project"`
	ID                int64       `json:"id"`
	Time              metav1.Time `json:"time"`
	Actor             string      `json:"actor"`
	Action            string      `json:"action"`
	Target            string      `json:"target,omitempty"`
	// ClientID and Connector are the client and the Connector the record concerns, if any.
	ClientID  string `json:"clientID,omitempty"`
	Connector string `json:"connector,omitempty"`
	// Outcome is success, refused or failed; Reason a code saying why for the last two
	// (docs/audit.md lists them per type).
	Outcome string            `json:"outcome,omitempty"`
	Reason  string            `json:"reason,omitempty"`
	Details map[string]string `json:"details,omitempty"`
}

// The lists.

type PersonList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Person `json:"items"`
}

type GrantList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Grant `json:"items"`
}

type ConnectionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Connection `json:"items"`
}

type LinkList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Link `json:"items"`
}

type ClientTokensList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClientTokens `json:"items"`
}

type PasskeyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Passkey `json:"items"`
}

type AuditRecordList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AuditRecord `json:"items"`
}
