package signin

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"testing"
	"time"

	"golang.org/x/crypto/argon2"
	"golang.org/x/crypto/bcrypt"

	"latchkey.dev/latchkey/internal/config"
)

func TestSafeReturn(t *testing.T) {
	p := &config.Project{Key: "team/demo", Issuer: "https://auth.example/team/demo"}
	for _, c := range []struct {
		in string
		ok bool
	}{
		{"/team/demo/account", true},
		{"/team/demo", true},
		{"/team/demo/authorize?client_id=x&redirect_uri=https%3A%2F%2Fa.example%2Fcb", true},
		{"/team/demo/account/services/link/abc", true},
		{"", false},
		{"https://evil.example/team/demo/account", false},
		{"//evil.example/team/demo/account", false},
		{"/\\evil.example", false},
		{"/team/demo\\..\\x", false},
		{"/team/demo/../other/account", false},
		{"/team/demo/%2e%2e/other", false},
		{"/team/demo/%2E%2E/other", false},
		{"/team/demo/./account", false},
		{"/team/demox/account", false},
		{"/team/other/account", false},
		{"/team/demo/account\r\nLocation: x", false},
		{"/team/demo/\taccount", false},
		{"/team/demo/accöunt", false},
		{"javascript:alert(1)", false},
		{"team/demo/account", false},
		{"/team/demo/%zz", false},
		{"/team/demo/" + string(make([]byte, 5000)), false},
	} {
		got, ok := SafeReturn(p, c.in)
		if ok != c.ok || (ok && got != c.in) {
			t.Errorf("SafeReturn(%q) = %q, %v; want ok=%v", c.in, got, ok, c.ok)
		}
	}
	// Under a public URL with a path prefix.
	pp := &config.Project{Key: "team/demo", Issuer: "https://auth.example/lk/team/demo"}
	if _, ok := SafeReturn(pp, "/lk/team/demo/account"); !ok {
		t.Error("prefixed issuer path refused")
	}
	if _, ok := SafeReturn(pp, "/team/demo/account"); ok {
		t.Error("path outside the prefixed issuer accepted")
	}
}

func TestVerifyPassword(t *testing.T) {
	bc, _ := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	salt := make([]byte, 16)
	rand.Read(salt)
	key := argon2.IDKey([]byte("pw"), salt, 1, 1024, 1, 32)
	ar := fmt.Sprintf("$argon2id$v=19$m=1024,t=1,p=1$%s$%s", base64.RawStdEncoding.EncodeToString(salt), base64.RawStdEncoding.EncodeToString(key))
	huge := fmt.Sprintf("$argon2id$v=19$m=4194304,t=1,p=1$%s$%s", base64.RawStdEncoding.EncodeToString(salt), base64.RawStdEncoding.EncodeToString(key))
	for _, c := range []struct {
		hash, pw string
		ok       bool
	}{
		{string(bc), "pw", true},
		{string(bc), "pW", false},
		{ar, "pw", true},
		{ar, "px", false},
		{huge, "pw", false},
		{"$argon2i$v=19$m=1024,t=1,p=1$aaaa$bbbb", "pw", false},
		{"$argon2id$v=19$m=1024,t=1$x$y", "pw", false},
		{"plaintext", "plaintext", false},
		{"", "", false},
	} {
		if got := verifyPassword(c.hash, c.pw); got != c.ok {
			t.Errorf("verifyPassword(%.20q, %q) = %v", c.hash, c.pw, got)
		}
	}
}

func TestSessionAuthTime(t *testing.T) {
	p := &config.Project{Lifetimes: config.Lifetimes{RecentSignIn: 15 * time.Minute}}
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	started := now.Add(-30 * time.Second)
	ago := func(d time.Duration) *float64 { f := float64(now.Add(-d).Unix()); return &f }
	for _, c := range []struct {
		name   string
		st     oidcState
		claim  *float64
		want   time.Time
		errNot bool // errNotRecent
		err    bool // any other error
	}{
		{name: "ordinary, none", st: oidcState{}, want: time.Time{}},
		{name: "ordinary, old", st: oidcState{}, claim: ago(3 * time.Hour), want: now.Add(-3 * time.Hour)},
		{name: "ordinary, slightly ahead", st: oidcState{}, claim: ago(-20 * time.Second), want: now},
		{name: "ordinary, far ahead", st: oidcState{}, claim: ago(-2 * time.Hour), err: true},
		{name: "ordinary, not a time", st: oidcState{}, claim: new(float64), err: true},
		{name: "recent, none", st: oidcState{Recent: true}, errNot: true},
		{name: "recent, old", st: oidcState{Recent: true}, claim: ago(16 * time.Minute), errNot: true},
		{name: "recent, inside", st: oidcState{Recent: true}, claim: ago(14 * time.Minute), want: now.Add(-14 * time.Minute)},
		{name: "again, before the request", st: oidcState{Again: true, Started: started.Unix()}, claim: ago(5 * time.Minute), errNot: true},
		{name: "again, skewed clock", st: oidcState{Again: true, Started: started.Unix()}, claim: ago(50 * time.Second), want: started},
		{name: "again, after the request", st: oidcState{Again: true, Started: started.Unix()}, claim: ago(10 * time.Second), want: now.Add(-10 * time.Second)},
		{name: "again, none", st: oidcState{Again: true, Started: started.Unix()}, errNot: true},
	} {
		got, err := sessionAuthTime(p, c.st, c.claim, now)
		switch {
		case c.errNot && !errors.Is(err, errNotRecent), c.err && (err == nil || errors.Is(err, errNotRecent)), !c.errNot && !c.err && err != nil:
			t.Errorf("%s: error %v", c.name, err)
		case err == nil && !got.Equal(c.want):
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
