package webhook_test

import (
	"net/http"
	"testing"

	"latchkey.dev/latchkey/test/stack"
)

// The sign-in tests moved to webhook/signin; these two helpers stay for the files of this
// package that still use them, and go with harness_test.go.

func sessionCookieOrNil(h http.Header) *http.Cookie { return stack.SessionCookie(h) }

func sessionCookie(t *testing.T, h http.Header) *http.Cookie {
	t.Helper()
	return stack.MustSessionCookie(t, h)
}
