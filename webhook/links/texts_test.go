package links

import (
	"strings"
	"testing"

	"latchkey.dev/latchkey/internal/store"
)

// TestTextsSpeakTheProjectsLanguage: the connect_message is in the Project's default language;
// the error_description, for machines and developers, stays English.
func TestTextsSpeakTheProjectsLanguage(t *testing.T) {
	for _, tc := range []struct{ lang, message string }{
		{"", "Open this link to let Repo Helper use your GitHub account."},
		{"en", "Open this link to let Repo Helper use your GitHub account."},
		{"de", "Öffnen Sie diesen Link, damit Repo Helper Ihr GitHub-Konto verwenden darf."},
		{"fr", "Ouvrez ce lien pour laisser Repo Helper utiliser votre compte GitHub."},
	} {
		desc, msg := Texts(store.LinkAllow, "GitHub", "Repo Helper", tc.lang)
		if msg != tc.message || desc != "the person has not allowed Repo Helper to use their GitHub account" {
			t.Errorf("%q: %q / %q", tc.lang, desc, msg)
		}
	}
	if _, msg := Texts(store.LinkConnect, "", "", "de"); !strings.Contains(msg, "der Dienst") || !strings.Contains(msg, "dieser Agent") {
		t.Errorf("fallback names not translated: %q", msg)
	}
}
