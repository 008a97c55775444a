package clientaddr

import (
	"net/http"
	"net/netip"
	"testing"
)

func TestAddress(t *testing.T) {
	proxies, err := ParsePrefixes("10.0.0.0/8, 192.168.1.10 fd00::/8")
	if err != nil {
		t.Fatal(err)
	}
	xff, _ := New(proxies, "")
	fwd, _ := New(proxies, "forwarded")
	none, _ := New(nil, "")
	for _, c := range []struct {
		name   string
		r      *Resolver
		peer   string
		header []string // values of the resolver's header
		want   string
	}{
		{"no proxy trusted: the peer", none, "203.0.113.7:4000", []string{"198.51.100.1"}, "203.0.113.7"},
		{"untrusted peer cannot spoof", xff, "203.0.113.7:4000", []string{"198.51.100.1"}, "203.0.113.7"},
		{"trusted proxy, no header", xff, "10.1.2.3:4000", nil, "10.1.2.3"},
		{"trusted proxy names the client", xff, "10.1.2.3:4000", []string{"198.51.100.1"}, "198.51.100.1"},
		{"the client's own entries are skipped", xff, "10.1.2.3:4000", []string{"1.1.1.1, 198.51.100.1"}, "198.51.100.1"},
		{"chain of trusted proxies", xff, "10.1.2.3:4000", []string{"6.6.6.6, 198.51.100.1, 192.168.1.10, 10.9.9.9"}, "198.51.100.1"},
		{"repeated header lines", xff, "10.1.2.3:4000", []string{"6.6.6.6", "198.51.100.1"}, "198.51.100.1"},
		{"all trusted: the leftmost", xff, "10.1.2.3:4000", []string{"10.0.0.5, 10.0.0.6"}, "10.0.0.5"},
		{"garbage nearest: the last trusted hop", xff, "10.1.2.3:4000", []string{"198.51.100.1, nonsense"}, "10.1.2.3"},
		{"with port", xff, "10.1.2.3:4000", []string{"198.51.100.1:5555"}, "198.51.100.1"},
		{"IPv6", xff, "[fd00::1]:4000", []string{"2001:db8::7"}, "2001:db8::7"},
		{"mapped IPv4 peer", xff, "[::ffff:10.1.2.3]:4000", []string{"198.51.100.1"}, "198.51.100.1"},
		{"Forwarded", fwd, "10.1.2.3:4000", []string{`for=6.6.6.6, for="[2001:db8::7]:4711";proto=https`}, "2001:db8::7"},
		{"Forwarded ignores X-Forwarded-For", fwd, "10.1.2.3:4000", nil, "10.1.2.3"},
		{"Forwarded obfuscated", fwd, "10.1.2.3:4000", []string{"for=_hidden"}, "10.1.2.3"},
		{"not an IP peer", xff, "pipe", nil, "pipe"},
	} {
		r, _ := http.NewRequest(http.MethodGet, "http://latchkey.example/", nil)
		r.RemoteAddr = c.peer
		for _, v := range c.header {
			r.Header.Add(c.r.Header, v)
		}
		if c.r == fwd {
			r.Header.Set(XForwardedFor, "9.9.9.9") // never read by a Forwarded resolver
		}
		if got := c.r.Address(r); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
	var nilResolver *Resolver
	r, _ := http.NewRequest(http.MethodGet, "http://latchkey.example/", nil)
	r.RemoteAddr, r.Header = "203.0.113.7:1", http.Header{"X-Forwarded-For": {"1.2.3.4"}}
	if got := nilResolver.Address(r); got != "203.0.113.7" {
		t.Errorf("nil resolver: %q", got)
	}
}

func TestParsePrefixes(t *testing.T) {
	got, err := ParsePrefixes(" 10.0.0.1/8,::ffff:192.0.2.1 ,2001:db8::/32 ")
	want := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.1/32"), netip.MustParsePrefix("2001:db8::/32")}
	if err != nil || len(got) != len(want) {
		t.Fatalf("%v %v", got, err)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("%d: %v, want %v", i, got[i], want[i])
		}
	}
	for _, bad := range []string{"10.0.0.0/33", "example.com", "10.0.0"} {
		if _, err := ParsePrefixes(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if _, err := New(nil, "X-Real-IP"); err == nil {
		t.Error("an unknown header accepted")
	}
}

func TestKey(t *testing.T) {
	for in, want := range map[string]string{
		"192.0.2.1":            "192.0.2.1",
		"2001:db8:1:2:3:4:5:6": "2001:db8:1:2::/64",
		"2001:db8:1:2:ffff::1": "2001:db8:1:2::/64",
		"2001:db8:1:3::1":      "2001:db8:1:3::/64",
		"fe80::1%eth0":         "fe80::/64",
		// IPv4-mapped: the IPv4 address, not the /64 every mapped address shares.
		"::ffff:192.0.2.1":    "192.0.2.1",
		"::ffff:198.51.100.7": "198.51.100.7",
		"pipe":                "pipe",
	} {
		if got := Key(in); got != want {
			t.Errorf("Key(%q) = %q, want %q", in, got, want)
		}
	}
}
