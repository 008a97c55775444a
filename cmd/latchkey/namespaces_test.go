package main

import (
	"slices"
	"strings"
	"testing"
)

func TestWatchNamespaces(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		err  string
	}{
		{"", nil, ""},
		{"team-a", []string{"team-a"}, ""},
		{" team-a , team-b,team-a,", []string{"team-a", "team-b"}, ""},
		{"team-a,Team_B", nil, `"Team_B" is not a namespace name`},
		{"team-a,-b", nil, `"-b" is not a namespace name`},
	} {
		got, err := watchNamespaces(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: err %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%q: %v %v, want %v", tc.in, got, err, tc.want)
		}
	}
}
