package v1alpha1

import (
	"encoding/base64"
	"regexp"
	"strings"
)

// plainClient is a client id that can stand in an object name as it is (a declared client's
// "lkc_…" id is not, nor is a client ID metadata document's URL).
var plainClient = regexp.MustCompile(`^[a-z0-9]([-_a-z0-9]{0,200}[a-z0-9])?$`)

// ClientName turns a client id into the part of an object name that stands for it: the id
// itself when it is lowercase letters, digits, dashes and underscores, otherwise "_" and the id in
// unpadded base64url ("_" never starts a plain id, so the two forms cannot meet).
func ClientName(clientID string) string {
	if plainClient.MatchString(clientID) {
		return clientID
	}
	return "_" + base64.RawURLEncoding.EncodeToString([]byte(clientID))
}

// ParseClientName reverses ClientName.
func ParseClientName(name string) (string, bool) {
	if enc, ok := strings.CutPrefix(name, "_"); ok {
		b, err := base64.RawURLEncoding.DecodeString(enc)
		if err != nil || len(b) == 0 {
			return "", false
		}
		return string(b), true
	}
	return name, plainClient.MatchString(name)
}

// GrantName names the grant of person to clientID.
func GrantName(person, clientID string) string { return person + "." + ClientName(clientID) }

// ParseGrantName reverses GrantName. Person names contain no dot.
func ParseGrantName(name string) (person, clientID string, ok bool) {
	person, client, ok := strings.Cut(name, ".")
	if !ok || person == "" {
		return "", "", false
	}
	clientID, ok = ParseClientName(client)
	return person, clientID, ok
}
