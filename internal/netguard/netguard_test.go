package netguard

import (
	"net/netip"
	"testing"
)

func TestPublic(t *testing.T) {
	for s, want := range map[string]bool{
		"93.184.216.34":        true,
		"2606:4700::6810:84e5": true,
		"127.0.0.1":            false,
		"127.1.2.3":            false,
		"::1":                  false,
		"10.1.2.3":             false,
		"172.16.0.1":           false,
		"192.168.1.1":          false,
		"169.254.169.254":      false, // cloud metadata
		"100.64.0.1":           false,
		"0.0.0.0":              false,
		"0.1.2.3":              false,
		"255.255.255.255":      false,
		"224.0.0.1":            false,
		"198.18.0.1":           false,
		"192.0.2.1":            false,
		"::":                   false,
		"fe80::1":              false,
		"fc00::1":              false,
		"fd12:3456::1":         false,
		"ff02::1":              false,
		"::ffff:127.0.0.1":     false,
		"::ffff:10.0.0.1":      false,
		"::ffff:93.184.216.34": true,
		"64:ff9b::a00:1":       false,
		"2002:a00:1::":         false,
		"2001:db8::1":          false,
		"2001:0::1":            false,
	} {
		if got := Public(netip.MustParseAddr(s)); got != want {
			t.Errorf("Public(%s) = %v, want %v", s, got, want)
		}
	}
}

func TestAllowedPermits(t *testing.T) {
	cluster := Allowed{netip.MustParsePrefix("10.96.0.0/12"), netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}
	for s, want := range map[string]bool{
		"93.184.216.34":    true,
		"10.96.0.10":       true,
		"127.0.0.1":        true,
		"::ffff:10.96.0.1": true,
		// Never, whatever the list says: cloud metadata, multicast, "this host".
		"169.254.169.254": false,
		"fe80::1":         false,
		"224.0.0.1":       false,
		"0.0.0.0":         false,
		"::":              false,
	} {
		if got := cluster.Permits(netip.MustParseAddr(s)); got != want {
			t.Errorf("Permits(%s) = %v, want %v", s, got, want)
		}
	}
	var none Allowed
	for _, s := range []string{"127.0.0.1", "10.0.0.1", "169.254.169.254", "::1", "fd00::1"} {
		if none.Permits(netip.MustParseAddr(s)) {
			t.Errorf("the empty allowance permits %s", s)
		}
	}
	if !Loopback.Permits(netip.MustParseAddr("127.0.0.2")) || Loopback.Permits(netip.MustParseAddr("10.0.0.1")) {
		t.Error("Loopback allows loopback addresses only")
	}
}

func TestControl(t *testing.T) {
	c := Control(Allowed{netip.MustParsePrefix("10.0.0.0/8")})
	for addr, ok := range map[string]bool{
		"93.184.216.34:443":  true,
		"10.1.2.3:80":        true,
		"127.0.0.1:8080":     false,
		"[::1]:443":          false,
		"169.254.169.254:80": false,
		"192.168.0.1:443":    false,
		"not-an-address:443": false,
		"[fe80::1%eth0]:443": false,
	} {
		if err := c("tcp", addr, nil); (err == nil) != ok {
			t.Errorf("Control(%s) = %v, want allowed=%v", addr, err, ok)
		}
	}
}
