// Package authzdetails implements rich authorization requests (RFC 9396): the
// authorization_details a client sends instead of, or beside, scope, checked against the
// types its Project declares (spec.authorizationDetails), shown to a person in words, and
// compared when a token is refreshed or exchanged (docs/authorization-details.md,
// docs/decisions/0074).
//
// Decisions worth knowing:
//   - Only declared types are accepted, and only the fields their declaration names: type,
//     locations, actions, datatypes and identifier. Any other member of a detail is refused
//     rather than passed through, because what a person approves must be what they were
//     shown, and the server cannot show or enforce a field it does not understand.
//   - Arrays are sets: Parse sorts them and drops repeats, so a detail has one canonical form
//     (what is stored, signed into tokens and compared).
//   - Covers compares detail by detail: a requested detail must fit inside one approved
//     detail. Taking the actions of one approved detail and the locations of another would
//     make a combination nobody approved.
//   - An omitted field is the empty set, and an empty set is covered only by an empty set:
//     RFC 9396 leaves the meaning of an omitted field to the API, which may read it as
//     "everything", so dropping a field is never a narrowing.
//   - Every string is bounded and free of control and format characters (bidirectional
//     overrides included), so Describe's text cannot be made to read as something else.
package authzdetails

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"path"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// ErrorCode is the OAuth error code for a request whose authorization_details are malformed,
// of a type the Project does not declare, or outside its declaration (RFC 9396 §5).
const ErrorCode = "invalid_authorization_details"

// Limits on what a client may send. They bound the work a request causes and the size of what
// is stored and signed into tokens, and keep a consent page readable.
const (
	// MaxBytes is the longest authorization_details parameter accepted, in bytes.
	MaxBytes = 8 << 10
	// MaxDetails is the most details one request may carry.
	MaxDetails = 16
	// MaxValues is the most entries of one detail's locations, actions or datatypes.
	MaxValues = 32
	// MaxValueLength is the longest location, action, datatype or identifier, in bytes.
	MaxValueLength = 512
)

// Type is one authorization_details type a Project declares, compiled (internal/config holds
// a Project's as Types).
type Type struct {
	// Name is the value of a detail's "type" ("github_repository").
	Name string
	// Label is how a person reads the type on the consent page ("GitHub repository"); Name
	// when empty.
	Label string
	// Connector is the key "namespace/name" of the Connector whose token exchange this type
	// governs, or "" when it governs none (it is then only carried into tokens for resource
	// servers to read).
	Connector string
	// Actions are the actions a detail may name. Empty: a detail may name none. Non-empty: a
	// detail must name at least one.
	Actions []string
	// Datatypes are the datatypes a detail may name. Empty: a detail may name none.
	Datatypes []string
	// RequireLocations: a detail must name at least one location.
	RequireLocations bool
	// LocationPrefixes, when set, are the only places a location may be: the prefix itself
	// without its final "/", or anything below it. Each ends in "/" (NewTypes adds it). Empty:
	// any absolute https URL.
	LocationPrefixes []string
	// Identifier: a detail may name an identifier (a resource's id at the API).
	Identifier bool
}

// Types are the authorization_details types of one Project, by name. The zero value declares
// none, and then every authorization_details parameter is refused.
type Types struct {
	byName map[string]*Type
	names  []string
}

// NewTypes compiles a Project's declarations. It refuses a repeated name, an action or
// datatype that could not be shown safely, and a location prefix that is not an absolute
// http(s) URL without query or fragment; the CRD's validation refuses the same, so an error
// here means the resource bypassed it.
func NewTypes(decls []Type) (Types, error) {
	ts := Types{byName: make(map[string]*Type, len(decls))}
	for _, d := range decls {
		if !validName(d.Name) {
			return Types{}, fmt.Errorf("authorization details type %q: not a valid type name", d.Name)
		}
		if _, dup := ts.byName[d.Name]; dup {
			return Types{}, fmt.Errorf("authorization details type %q is declared twice", d.Name)
		}
		t := d
		t.Actions = canonical(d.Actions)
		t.Datatypes = canonical(d.Datatypes)
		for _, v := range slices.Concat(t.Actions, t.Datatypes, []string{t.Label}) {
			if !safeText(v, v == t.Label) {
				return Types{}, fmt.Errorf("authorization details type %q: %q cannot be shown safely", d.Name, v)
			}
		}
		t.LocationPrefixes = nil
		for _, p := range d.LocationPrefixes {
			u, err := url.Parse(p)
			if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil ||
				u.RawQuery != "" || u.Fragment != "" || strings.Contains(p, "#") {
				return Types{}, fmt.Errorf("authorization details type %q: location prefix %q is not an absolute http(s) URL without query or fragment", d.Name, p)
			}
			if !strings.HasSuffix(p, "/") {
				p += "/"
			}
			t.LocationPrefixes = append(t.LocationPrefixes, p)
		}
		ts.byName[t.Name] = &t
		ts.names = append(ts.names, t.Name)
	}
	slices.Sort(ts.names)
	return ts, nil
}

// Lookup returns the declared type name.
func (ts Types) Lookup(name string) (*Type, bool) {
	t, ok := ts.byName[name]
	return t, ok
}

// Names are the declared type names, sorted: the metadata's authorization_details_types_supported.
func (ts Types) Names() []string { return slices.Clone(ts.names) }

// Len is how many types are declared.
func (ts Types) Len() int { return len(ts.names) }

// Governs reports whether any declared type governs the Connector connectorKey.
func (ts Types) Governs(connectorKey string) bool {
	for _, n := range ts.names {
		if ts.byName[n].Connector == connectorKey {
			return true
		}
	}
	return false
}

// Detail is one validated authorization_details entry in canonical form: arrays sorted,
// without repeats.
type Detail struct {
	Type       string   `json:"type"`
	Locations  []string `json:"locations,omitempty"`
	Actions    []string `json:"actions,omitempty"`
	Datatypes  []string `json:"datatypes,omitempty"`
	Identifier string   `json:"identifier,omitempty"`
}

// Error is a refused authorization_details parameter; its text is the error_description
// (English, for the client's developer) of an invalid_authorization_details answer.
type Error struct{ Description string }

func (e *Error) Error() string { return e.Description }

func invalid(format string, args ...any) error {
	return &Error{Description: fmt.Sprintf(format, args...)}
}

// IsInvalid reports whether err is a refusal of the client's authorization_details (an
// *Error), to be answered with ErrorCode.
func IsInvalid(err error) bool {
	var e *Error
	return errors.As(err, &e)
}

// Parse reads an authorization_details parameter (a JSON array of objects, RFC 9396 §2) and
// validates it against ts. An empty parameter is no details (nil, nil). Every refusal is an
// *Error naming the first problem.
func Parse(ts Types, raw string) ([]Detail, error) {
	if raw == "" {
		return nil, nil
	}
	if len(raw) > MaxBytes {
		return nil, invalid("authorization_details is longer than %d bytes", MaxBytes)
	}
	if !utf8.ValidString(raw) {
		return nil, invalid("authorization_details is not UTF-8")
	}
	trimmed := strings.TrimSpace(raw)
	if !strings.HasPrefix(trimmed, "[") {
		return nil, invalid("authorization_details must be a JSON array of objects")
	}
	dec := json.NewDecoder(strings.NewReader(trimmed))
	var objs []map[string]json.RawMessage
	if err := dec.Decode(&objs); err != nil {
		return nil, invalid("authorization_details must be a JSON array of objects: %s", jsonProblem(err))
	}
	if dec.More() || dec.InputOffset() != int64(len(trimmed)) {
		return nil, invalid("authorization_details has data after its array")
	}
	if len(objs) > MaxDetails {
		return nil, invalid("authorization_details has more than %d entries", MaxDetails)
	}
	ds := make([]Detail, len(objs))
	for i, o := range objs {
		if err := decodeOne(o, &ds[i]); err != nil {
			return nil, err
		}
	}
	if len(ds) == 0 {
		return nil, invalid("authorization_details is an empty array")
	}
	if err := Validate(ts, ds); err != nil {
		return nil, err
	}
	return ds, nil
}

// fields are the members a detail may have, spelled exactly (encoding/json alone would also
// take "Type" or "ACTIONS", and a second spelling of a member is a second meaning).
var fields = map[string]bool{"type": true, "locations": true, "actions": true, "datatypes": true, "identifier": true}

func decodeOne(o map[string]json.RawMessage, d *Detail) error {
	if o == nil {
		return invalid("an authorization_details entry is not an object")
	}
	for k := range o {
		if !fields[k] {
			return invalid("authorization_details: unknown field %q (only type, locations, actions, datatypes and identifier are accepted)", truncate(k, 80))
		}
	}
	if err := decodeField(o, "type", &d.Type); err != nil {
		return err
	}
	if err := decodeField(o, "identifier", &d.Identifier); err != nil {
		return err
	}
	for name, dst := range map[string]*[]string{"locations": &d.Locations, "actions": &d.Actions, "datatypes": &d.Datatypes} {
		if err := decodeField(o, name, dst); err != nil {
			return err
		}
	}
	return nil
}

func decodeField(o map[string]json.RawMessage, name string, dst any) error {
	raw, ok := o[name]
	if !ok {
		return nil
	}
	if err := json.Unmarshal(raw, dst); err != nil || string(raw) == "null" {
		return invalid("authorization_details: field %q has the wrong type", name)
	}
	return nil
}

// jsonProblem says what was wrong without echoing the client's input at length.
func jsonProblem(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		if te.Field == "" {
			return "an entry is not an object"
		}
		return fmt.Sprintf("field %q has the wrong type", te.Field)
	}
	if s := err.Error(); strings.HasPrefix(s, "json: unknown field ") {
		return "unknown field " + truncate(strings.TrimPrefix(s, "json: unknown field "), 80)
	}
	return "malformed JSON"
}

// Validate checks details against ts and puts them in canonical form in place (sorted sets
// without repeats). Parse calls it; it is also how a stored or token-borne list is rechecked
// against the Project's current declarations.
func Validate(ts Types, ds []Detail) error {
	if len(ds) > MaxDetails {
		return invalid("authorization_details has more than %d entries", MaxDetails)
	}
	for i := range ds {
		if err := validateOne(ts, &ds[i]); err != nil {
			return err
		}
	}
	return nil
}

func validateOne(ts Types, d *Detail) error {
	if d.Type == "" {
		return invalid("an authorization_details entry has no type")
	}
	t, ok := ts.Lookup(d.Type)
	if !ok {
		return invalid("authorization_details type %q is not supported here", truncate(d.Type, 80))
	}
	for name, vs := range map[string][]string{"locations": d.Locations, "actions": d.Actions, "datatypes": d.Datatypes} {
		if len(vs) > MaxValues {
			return invalid("authorization_details type %q: %s has more than %d entries", t.Name, name, MaxValues)
		}
	}
	d.Actions, d.Datatypes, d.Locations = canonical(d.Actions), canonical(d.Datatypes), canonical(d.Locations)
	if err := allowed(t, "actions", d.Actions, t.Actions); err != nil {
		return err
	}
	if len(t.Actions) > 0 && len(d.Actions) == 0 {
		return invalid("authorization_details type %q requires actions (one or more of %s)", t.Name, strings.Join(t.Actions, ", "))
	}
	if err := allowed(t, "datatypes", d.Datatypes, t.Datatypes); err != nil {
		return err
	}
	if t.RequireLocations && len(d.Locations) == 0 {
		return invalid("authorization_details type %q requires locations", t.Name)
	}
	for _, l := range d.Locations {
		if !t.locationAllowed(l) {
			return invalid("authorization_details type %q: location %q is not allowed", t.Name, truncate(l, 120))
		}
	}
	if d.Identifier != "" {
		if !t.Identifier {
			return invalid("authorization_details type %q does not take an identifier", t.Name)
		}
		if !safeText(d.Identifier, false) {
			return invalid("authorization_details type %q: identifier is longer than %d bytes or has control characters", t.Name, MaxValueLength)
		}
	}
	return nil
}

func allowed(t *Type, field string, got, declared []string) error {
	for _, v := range got {
		if !slices.Contains(declared, v) {
			if len(declared) == 0 {
				return invalid("authorization_details type %q does not take %s", t.Name, field)
			}
			return invalid("authorization_details type %q: %s %q is not one of %s", t.Name, field, truncate(v, 80), strings.Join(declared, ", "))
		}
	}
	return nil
}

// locationAllowed: an absolute URL without userinfo, query or fragment, whose path has no dot
// segments and no escaped characters that would change its meaning ("%2F"), inside a declared
// prefix (or https anywhere when none is declared). Anything looser would let "…/acme/../other"
// pass a prefix check it escapes.
func (t *Type) locationAllowed(l string) bool {
	if len(l) > MaxValueLength || !safeText(l, false) || strings.ContainsAny(l, "\\#?") {
		return false
	}
	u, err := url.Parse(l)
	if err != nil || u.Host == "" || u.User != nil || u.RawPath != "" || u.Opaque != "" {
		return false
	}
	if u.Path != "" && (path.Clean(u.Path) != strings.TrimSuffix(u.Path, "/") || strings.Contains(u.Path, "//")) {
		return false
	}
	if strings.Contains(strings.ToLower(l), "%2e") {
		return false
	}
	if len(t.LocationPrefixes) == 0 {
		return u.Scheme == "https"
	}
	for _, p := range t.LocationPrefixes {
		if l == strings.TrimSuffix(p, "/") || strings.HasPrefix(l, p) {
			return true
		}
	}
	return false
}

// canonical sorts a set and drops repeats; nil stays nil.
func canonical(vs []string) []string {
	if len(vs) == 0 {
		return nil
	}
	out := slices.Clone(vs)
	slices.Sort(out)
	return slices.Compact(out)
}

// validName: a type name as RFC 9396 examples write them, letters, digits, "_", "-", ".", ":"
// and "/", so a URI may serve as a type.
func validName(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_-.:/", r)) {
			return false
		}
	}
	return true
}

// safeText: bounded, and no control or format characters (which include the bidirectional
// overrides that make text read in another order than it is written). Spaces are allowed only
// where spaces is true (a label), never in a value that is compared.
func safeText(s string, spaces bool) bool {
	if s == "" || len(s) > MaxValueLength || !utf8.ValidString(s) {
		return s == "" && spaces
	}
	for _, r := range s {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || (!spaces && unicode.IsSpace(r)) {
			return false
		}
	}
	return true
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// Marshal is the canonical JSON of details, as stored and as the authorization_details claim
// of a JWT; "" for none.
func Marshal(ds []Detail) string {
	if len(ds) == 0 {
		return ""
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(ds) // a []Detail always encodes
	return strings.TrimSuffix(b.String(), "\n")
}

// Unmarshal reads what Marshal wrote (a stored grant's details) without validating them
// against a Project's types; "" is none.
func Unmarshal(s string) ([]Detail, error) {
	if s == "" {
		return nil, nil
	}
	var ds []Detail
	if err := json.Unmarshal([]byte(s), &ds); err != nil {
		return nil, fmt.Errorf("authzdetails: stored details: %w", err)
	}
	return ds, nil
}

// ForConnector returns the details whose type governs the Connector connectorKey.
func ForConnector(ts Types, ds []Detail, connectorKey string) []Detail {
	var out []Detail
	for _, d := range ds {
		if t, ok := ts.Lookup(d.Type); ok && t.Connector == connectorKey {
			out = append(out, d)
		}
	}
	return out
}
