package ciba

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/webhook/site"
)

// Details validates an authorization_details parameter (RFC 9396 §2): "" when absent, else the
// array as sent, compacted. This is the one place where the Project's types of authorization
// details plug in; until they do, any array of objects that each carry a string "type" is
// accepted, and Describe says each in words from its type and fields.
func Details(p *config.Project, c *site.Client, raw string) (string, error) {
	if raw == "" {
		return "", nil
	}
	if len(raw) > MaxAuthorizationDetails {
		return "", errInvalidDetails.WithDescription("authorization_details is too long")
	}
	var list []map[string]json.RawMessage
	if err := json.Unmarshal([]byte(raw), &list); err != nil || len(list) == 0 {
		return "", errInvalidDetails.WithDescription("authorization_details must be a JSON array of objects")
	}
	for _, d := range list {
		var typ string
		if err := json.Unmarshal(d["type"], &typ); err != nil || typ == "" {
			return "", errInvalidDetails.WithDescription("every authorization detail needs a type")
		}
	}
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(raw)); err != nil {
		return "", errInvalidDetails.WithDescription("authorization_details must be a JSON array of objects")
	}
	return b.String(), nil
}

// Describe says each stored authorization detail in words for the approvals page: its type and
// its fields as "name: value". Plain text; the page escapes it.
func Describe(p *config.Project, stored string) []string {
	if stored == "" {
		return nil
	}
	var list []map[string]any
	if json.Unmarshal([]byte(stored), &list) != nil {
		return nil
	}
	out := make([]string, 0, len(list))
	for _, d := range list {
		typ, _ := d["type"].(string)
		var parts []string
		for _, k := range sortedKeys(d) {
			if k == "type" {
				continue
			}
			v, _ := json.Marshal(d[k])
			parts = append(parts, k+": "+strings.Trim(string(v), `"`))
		}
		s := typ
		if len(parts) > 0 {
			s += " (" + strings.Join(parts, ", ") + ")"
		}
		out = append(out, s)
	}
	return out
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
