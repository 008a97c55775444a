package sqlstore

import (
	"encoding/json"
	"maps"
	"testing"
)

// The details column is written and read as encoding/json would, plain or not: the text of
// every map is encoding/json's, and every text reads back as encoding/json reads it, errors
// included.
func TestDetailsColumns(t *testing.T) {
	values := []map[string]string{
		nil, {}, {"": ""}, {"grant_type": "client_credentials", "family_id": "Jr0d5n4m1QkZ8yX2b7Lp3w", "scope": "read write"},
		{"b": "2", "a": "1", "c": "3"}, {"audience": "https://mcp.example/mcp"}, {"act": `a","b`}, {`k":"v`: "x"},
		{"quote": `say "hi"`}, {"back": `back\slash`}, {"html": "<tag> a&b"}, {"tab": "tab\there"}, {"ünï": "日本"},
		{"sep": "line\u2028sep"}, {"del": "del\x7f"}, {"bad": "\xff"}, {"comma": ",", "colon": ":", "brace": "}"},
	}
	for _, v := range values {
		got, err := detailsText(v)
		if err != nil {
			t.Fatalf("detailsText(%q): %v", v, err)
		}
		want := "{}"
		if len(v) > 0 {
			b, _ := json.Marshal(v)
			want = string(b)
		}
		if got != want {
			t.Errorf("detailsText(%q) = %s, encoding/json writes %s", v, got, want)
		}
		back, err := fromDetails(got)
		if err != nil {
			t.Fatalf("fromDetails(%s): %v", got, err)
		}
		var viaJSON map[string]string
		if got != "{}" {
			_ = json.Unmarshal([]byte(got), &viaJSON)
		}
		if !maps.Equal(back, viaJSON) || (len(v) == 0) != (back == nil) {
			t.Errorf("fromDetails(%s) = %q, encoding/json reads %q", got, back, viaJSON)
		}
	}
	// Written by other JSON writers (spaces, escapes), or not a map of strings at all: read
	// exactly as encoding/json reads them, refused where it refuses them.
	for _, in := range []string{
		`{"a": "b"}`, `{ "a":"b" }`, `{"a":"b","c":"d"}`, `{"a":"b","a":"c"}`, `{"a":"\u0041"}`, `{"a":"b\"c"}`, `null`,
		`{"a":1}`, `{"a":"b","c"}`, `{"a":"b":"c"}`, `{"a":"b"},{"c":"d"}`, `{"a":"b`, `{"a":"tab	here"}`, `{"a":"` + "\xff" + `"}`,
		`["a"]`, ``,
	} {
		got, err := fromDetails(in)
		var want map[string]string
		wantErr := json.Unmarshal([]byte(in), &want)
		if (err != nil) != (wantErr != nil) || !maps.Equal(got, want) {
			t.Errorf("fromDetails(%s) = %q, %v; encoding/json reads %q, %v", in, got, err, want, wantErr)
		}
	}
}

// BenchmarkAuditDetails is what a token.issued record's details cost to write and to read back,
// here and through encoding/json.
func BenchmarkAuditDetails(b *testing.B) {
	m := map[string]string{"grant_type": "client_credentials", "family_id": "Jr0d5n4m1QkZ8yX2b7Lp3w", "scope": "read"}
	b.Run("plain", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s, _ := detailsText(m)
			if _, err := fromDetails(s); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s, _ := json.Marshal(m)
			var back map[string]string
			if err := json.Unmarshal(s, &back); err != nil {
				b.Fatal(err)
			}
		}
	})
}
