package webhook_test

import (
	"net/http"

	"latchkey.dev/latchkey/test/stack"
)

// The sign-in tests moved to webhook/signin; this helper stays for the files of this package
// that still use it, and goes with harness_test.go.

func sessionCookieOrNil(h http.Header) *http.Cookie { return stack.SessionCookie(h) }
