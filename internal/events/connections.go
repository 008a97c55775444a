package events

// Audit actions of a connection's life that the API-key page writes exactly as the upstream
// callback (webhook/callback) does, so one connection reads the same in the trail however it
// was made; details.method is "api_key" for a key (docs/audit.md, docs/api-key-connectors.md).
const (
	// ConnectionStarted: a person began connecting a service; for a key, when they submit it.
	ConnectionStarted = "connection.started"
	// ConnectionSaved: the connection was checked with the service and stored.
	ConnectionSaved = "connection.saved"
	// ConnectionFailed: the service did not accept it, or could not be reached; nothing was
	// stored. details.reason: bad_key (the service answered 401 or 403 to a key), service,
	// timeout, address_not_allowed, access_ended, and for codes bad_code.
	ConnectionFailed = "connection.failed"
)
