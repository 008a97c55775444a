// Package netguard decides which addresses the server may dial when a URL it fetches was chosen
// by someone else: a client's metadata document URL, or a Connector's endpoints, which a tenant
// team writes. Without it such a URL could make the server call what only it can reach — its
// own loopback ports, cluster Services, the cloud's metadata service at 169.254.169.254 — and
// report back what answered (server-side request forgery).
//
// The check runs at dial time, on the address actually being dialled after DNS resolution, for
// every address tried: a name that resolves to a public address when looked at and to a private
// one when connected to (DNS rebinding) gets nowhere. A client built here never uses a proxy,
// which would dial for it, past the check.
package netguard

import (
	"errors"
	"net"
	"net/netip"
	"syscall"
	"time"
)

// ErrNotPublic is returned (wrapped in the dial error) for an address that is not public and
// not allowed.
var ErrNotPublic = errors.New("address is not public")

// Allowed lists address ranges outside the public internet that may be dialled anyway, such as
// an in-cluster identity provider's Service. The zero value allows none. Whatever it lists,
// link-local addresses (where cloud metadata services answer), multicast and the unspecified
// address are never dialled: no service a person connects to lives there.
type Allowed []netip.Prefix

// Loopback allows the machine's own loopback addresses. Tests and local development use it
// for servers on 127.0.0.1; in a pod it would reach the server's own ports.
var Loopback = Allowed{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

// Permits reports whether a may be dialled: a public address, or one in an allowed range that
// is not in a range never dialled.
func (al Allowed) Permits(a netip.Addr) bool {
	a = a.Unmap()
	if Public(a) {
		return true
	}
	if !a.IsValid() || a.Zone() != "" || a.IsUnspecified() || a.IsLinkLocalUnicast() || a.IsMulticast() ||
		a.IsLinkLocalMulticast() || a.IsInterfaceLocalMulticast() {
		return false
	}
	for _, p := range al {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Control is a net.Dialer Control function that refuses every address al does not permit.
func Control(al Allowed) func(network, address string, _ syscall.RawConn) error {
	return func(_, address string, _ syscall.RawConn) error {
		host, _, err := net.SplitHostPort(address)
		if err != nil {
			return ErrNotPublic
		}
		a, err := netip.ParseAddr(host)
		if err != nil || !al.Permits(a) {
			return ErrNotPublic
		}
		return nil
	}
}

// Dialer returns a dialer that refuses what al does not permit.
func Dialer(timeout time.Duration, al Allowed) *net.Dialer {
	return &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second, Control: Control(al)}
}

// notPublic are special-purpose ranges (IANA registries) that netip's predicates do not cover.
var notPublic = func() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range []string{
		"0.0.0.0/8",       // "this network"
		"100.64.0.0/10",   // carrier-grade NAT
		"192.0.0.0/24",    // IETF protocol assignments
		"192.0.2.0/24",    // documentation
		"192.88.99.0/24",  // 6to4 relay anycast
		"198.18.0.0/15",   // benchmarking
		"198.51.100.0/24", // documentation
		"203.0.113.0/24",  // documentation
		"240.0.0.0/4",     // reserved, and the broadcast address
		"64:ff9b::/96",    // NAT64: would reach IPv4 addresses behind the gateway
		"64:ff9b:1::/48",  // local-use NAT64
		"100::/64",        // discard
		"2001::/23",       // IETF protocol assignments (Teredo, ORCHID, …)
		"2001:db8::/32",   // documentation
		"2002::/16",       // 6to4: embeds any IPv4 address
		"fec0::/10",       // site-local (deprecated)
	} {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}()

// Public reports whether a is an address on the public internet.
func Public(a netip.Addr) bool {
	a = a.Unmap()
	if !a.IsValid() || a.Zone() != "" || a.IsUnspecified() || a.IsLoopback() || a.IsPrivate() ||
		a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() || a.IsInterfaceLocalMulticast() || a.IsMulticast() {
		return false
	}
	if a.Is4In6() {
		return false
	}
	for _, p := range notPublic {
		if p.Contains(a) {
			return false
		}
	}
	return true
}
