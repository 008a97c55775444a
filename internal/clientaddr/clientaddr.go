// Package clientaddr finds the address of the client behind a request, for rate limits. The
// connection's peer is the client unless the peer is one of the configured trusted proxies
// (an ingress controller, a load balancer); then the client is read from the forwarding header
// that proxy sets, from the right, skipping the trusted proxies' own entries. Anyone else can
// write any header, so a header from an untrusted peer is never read.
package clientaddr

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// The forwarding headers a Resolver can read.
const (
	XForwardedFor = "X-Forwarded-For"
	Forwarded     = "Forwarded" // RFC 7239
)

// Resolver finds client addresses. The zero value trusts no proxy: the peer is the client.
type Resolver struct {
	// Trusted are the proxies whose forwarding header is believed.
	Trusted []netip.Prefix
	// Header is XForwardedFor (when empty) or Forwarded. Only one is read: a proxy that
	// appends to one passes the other through from the client untouched.
	Header string
}

// New returns a Resolver trusting the given proxies and reading header (XForwardedFor when
// empty).
func New(trusted []netip.Prefix, header string) (*Resolver, error) {
	switch http.CanonicalHeaderKey(header) {
	case "", XForwardedFor:
		header = XForwardedFor
	case Forwarded:
		header = Forwarded
	default:
		return nil, fmt.Errorf("clientaddr: header %q is neither %s nor %s", header, XForwardedFor, Forwarded)
	}
	return &Resolver{Trusted: trusted, Header: header}, nil
}

// ParsePrefixes reads a list of CIDR prefixes or single addresses separated by commas or
// spaces ("10.0.0.0/8, 192.168.1.10, fd00::/8").
func ParsePrefixes(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' }) {
		if strings.Contains(f, "/") {
			p, err := netip.ParsePrefix(f)
			if err != nil {
				return nil, fmt.Errorf("%q is not a CIDR prefix: %w", f, err)
			}
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return nil, fmt.Errorf("%q is not an IP address or CIDR prefix", f)
		}
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// Address is the client's address for r. It is never empty: a peer that is not an IP address
// (a test's pipe) is returned as written.
func (c *Resolver) Address(r *http.Request) string {
	peer, ok := parseHostPort(r.RemoteAddr)
	if !ok {
		return r.RemoteAddr
	}
	if c == nil || !c.trusted(peer) {
		return peer.String()
	}
	hops := c.hops(r.Header)
	// From the right: the entry the nearest proxy wrote comes last. The first one that is not
	// a trusted proxy is the client; entries left of it were written by the client itself.
	client := peer
	for i := len(hops) - 1; i >= 0; i-- {
		a, ok := parseHop(hops[i])
		if !ok {
			// Not an address (obfuscated, "unknown", garbage): the last trusted hop is as far
			// as anything can be known.
			break
		}
		client = a
		if !c.trusted(a) {
			break
		}
	}
	return client.String()
}

// FromTrustedProxy reports whether r's peer is one of the trusted proxies, whose headers
// about the client (its address, a request id) may be believed.
func (c *Resolver) FromTrustedProxy(r *http.Request) bool {
	peer, ok := parseHostPort(r.RemoteAddr)
	return ok && c != nil && c.trusted(peer)
}

func (c *Resolver) trusted(a netip.Addr) bool {
	for _, p := range c.Trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// hops lists the header's entries in order, across repeated header lines.
func (c *Resolver) hops(h http.Header) []string {
	var out []string
	for _, line := range h.Values(c.Header) {
		for _, elem := range strings.Split(line, ",") {
			elem = strings.TrimSpace(elem)
			if c.Header == Forwarded {
				elem = forwardedFor(elem)
			}
			out = append(out, elem)
		}
	}
	return out
}

// forwardedFor is the for= parameter of one RFC 7239 forwarded-element, unquoted, or "".
func forwardedFor(elem string) string {
	for _, pair := range strings.Split(elem, ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if ok && strings.EqualFold(k, "for") {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}

// parseHop reads an address as proxies write it: "192.0.2.1", "192.0.2.1:4711", "2001:db8::1",
// "[2001:db8::1]" or "[2001:db8::1]:4711".
func parseHop(s string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap().WithZone(""), true
	}
	if a, ok := parseHostPort(s); ok {
		return a, true
	}
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil {
			return a.Unmap().WithZone(""), true
		}
	}
	return netip.Addr{}, false
}

func parseHostPort(s string) (netip.Addr, bool) {
	host, _, err := net.SplitHostPort(s)
	if err != nil {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap().WithZone(""), true
}

// Key is the part of an address that rate limits count by: an IPv4 address, or the /64 an
// IPv6 address is in (one host is routinely given a whole /64, so counting single IPv6
// addresses would give it 2^64 buckets). An IPv4-mapped IPv6 address counts as its IPv4
// address: its /64 would put every IPv4 client in one bucket.
func Key(addr string) string {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return addr
	}
	a = a.Unmap().WithZone("")
	if a.Is4() {
		return a.String()
	}
	p, _ := a.Prefix(64)
	return p.String()
}
