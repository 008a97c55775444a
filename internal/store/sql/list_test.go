package sqlstore

import (
	"encoding/json"
	"slices"
	"testing"
)

// list and fromList write and read exactly what encoding/json does, plain values or not.
func TestListColumns(t *testing.T) {
	values := [][]string{
		nil, {}, {""}, {"", ""}, {"read"}, {"openid", "profile", "repo:status"},
		{"https://mcp.example/mcp", "repo-helper"}, {`a","b`}, {`quote"`}, {`back\slash`}, {"<tag>", "a&b"},
		{"tab\there"}, {"ünïcödé", "日本"}, {"line\u2028sep"}, {"del\x7f"}, {"a", `b","c`, "d"}, {"]", "[", ","},
	}
	for _, v := range values {
		got := list(v)
		want := "[]"
		if len(v) > 0 {
			b, _ := json.Marshal(v)
			want = string(b)
		}
		if got != want {
			t.Errorf("list(%q) = %s, encoding/json writes %s", v, got, want)
		}
		back, err := fromList(got)
		if err != nil {
			t.Fatalf("fromList(%s): %v", got, err)
		}
		if len(v) == 0 && back != nil || len(v) > 0 && !slices.Equal(back, v) {
			t.Errorf("fromList(%s) = %q, want %q", got, back, v)
		}
	}
	// Written by other JSON writers (spaces), or not a list of strings at all.
	for in, want := range map[string][]string{`["a", "b"]`: {"a", "b"}, `[ "x" ]`: {"x"}} {
		got, err := fromList(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("fromList(%s) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{`["a"],["b"]`, `["a",1]`, `{"a":"b"}`, `["a`} {
		if got, err := fromList(bad); err == nil {
			t.Errorf("fromList(%s) = %q, want an error", bad, got)
		}
	}
}
