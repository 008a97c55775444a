package v1alpha1

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ResourceSharedConnections is the resource of SharedConnection: the one account an
// administrator connected for an Organisation Connector (docs/shared-connections.md). Unlike
// the other resources it can be created: creating one answers a start URL.
const ResourceSharedConnections = "sharedconnections"

// SharedConnection is an Organisation Connector's shared account, connected or not. Its name is
// SharedConnectionName of the Connector; it lives in the namespace of the Connector's Project.
//
// Creating it does not connect anything by itself: the answer carries StartURL, which an
// administrator opens in a browser before StartExpiresAt, once, to sign in at the service with
// the account to share. Deleting it disconnects the account, revoking it at the service where
// the Connector can.
type SharedConnection struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Project           string `json:"project"`
	// Connector is the Connector's "namespace/name".
	Connector string `json:"connector"`
	// State is the shared connection's state (active, expiring, needs_reconnect or
	// revoked_upstream: docs/connection-health.md), or "not-connected".
	State string `json:"state"`
	// Account is how the service names the shared account; AccountID its stable id.
	Account   string   `json:"account,omitempty"`
	AccountID string   `json:"accountID,omitempty"`
	Scopes    []string `json:"scopes,omitempty"`
	// Clients are the OAuthClients ("namespace/name") the Project lets use the account.
	Clients     []string     `json:"clients,omitempty"`
	ConnectedAt *metav1.Time `json:"connectedAt,omitempty"`
	// StartURL and StartExpiresAt are set only in the answer to a create: the single-use
	// address that starts connecting the account in the browser that opens it.
	StartURL       string       `json:"startURL,omitempty"`
	StartExpiresAt *metav1.Time `json:"startExpiresAt,omitempty"`
}

// SharedConnectionList is a list of SharedConnection.
type SharedConnectionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SharedConnection `json:"items"`
}

// SharedConnectionName names the shared connection of the Connector namespace/name:
// "namespace.name". A namespace holds no dot, so the first dot separates the two.
func SharedConnectionName(namespace, name string) string { return namespace + "." + name }

// ParseSharedConnectionName reverses SharedConnectionName into the Connector's key.
func ParseSharedConnectionName(s string) (connector string, ok bool) {
	ns, name, ok := strings.Cut(s, ".")
	if !ok || ns == "" || name == "" {
		return "", false
	}
	return ns + "/" + name, true
}
