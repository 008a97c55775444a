package pages

import "strings"

// KindName names the kind for the stylesheet ("known", "device", "website").
func (d Destination) KindName() string {
	switch d.Kind {
	case DestinationRecognised:
		return "known"
	case DestinationDevice:
		return "device"
	default:
		return "website"
	}
}

// AddressParts is a destination address cut for display: Before + Host + After is the address
// in full, character for character; Host, when set, is what a person must read to know where
// access goes (the host and port of an http or https address), so the page emphasises it.
type AddressParts struct{ Before, Host, After string }

// Address cuts the destination's URI for display. Nothing is dropped or normalised: a
// look-alike such as https://claude.ai.evil.example/ shows its whole host.
func (d Destination) Address() AddressParts {
	u := d.URI
	for _, scheme := range []string{"https://", "http://"} {
		if !strings.HasPrefix(u, scheme) {
			continue
		}
		rest := u[len(scheme):]
		end := strings.IndexAny(rest, "/?#")
		if end < 0 {
			end = len(rest)
		}
		if end == 0 {
			break
		}
		return AddressParts{Before: scheme, Host: rest[:end], After: rest[end:]}
	}
	return AddressParts{Before: u}
}
