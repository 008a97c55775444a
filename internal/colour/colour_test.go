package colour

import (
	"math"
	"testing"
)

// Reference values from the WCAG 2.x definition, as published by WebAIM's contrast checker.
func TestContrast(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want float64
	}{
		{"#000000", "#ffffff", 21},
		{"#ffffff", "#ffffff", 1},
		{"#777777", "#ffffff", 4.48},
		{"#767676", "#ffffff", 4.54},
		{"#0000ff", "#ffffff", 8.59},
		{"#ff0000", "#ffffff", 3.99},
		{"#008000", "#ffffff", 5.14},
	} {
		got := Contrast(MustParse(tc.a), MustParse(tc.b))
		if math.Abs(got-tc.want) > 0.01 {
			t.Errorf("Contrast(%s, %s) = %.3f, want %.2f", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestParse(t *testing.T) {
	for _, bad := range []string{"", "#fff", "2454d6", "#2454dg", "#2454d6 ", "red", "#+454d6"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
	if c := MustParse("#A1b2C3"); c.String() != "#a1b2c3" {
		t.Errorf("got %s", c)
	}
}

func TestRatioRoundsDown(t *testing.T) {
	if got := Ratio(4.4999); got != "4.49:1" {
		t.Errorf("got %s", got)
	}
}
