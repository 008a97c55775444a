// Package colour parses sRGB colours and measures their contrast as WCAG 2.x defines it, so a
// colour chosen for a Project's pages can be refused before a person has to read it.
package colour

import (
	"fmt"
	"math"
	"strconv"
)

// RGB is an sRGB colour, 8 bits a channel.
type RGB struct{ R, G, B uint8 }

// Parse reads "#rrggbb" (either case).
func Parse(s string) (RGB, error) {
	if len(s) != 7 || s[0] != '#' {
		return RGB{}, fmt.Errorf("%q is not a colour #rrggbb", s)
	}
	var c [3]uint8
	for i := range c {
		v, err := strconv.ParseUint(s[1+2*i:3+2*i], 16, 8)
		if err != nil {
			return RGB{}, fmt.Errorf("%q is not a colour #rrggbb", s)
		}
		c[i] = uint8(v)
	}
	return RGB{c[0], c[1], c[2]}, nil
}

// MustParse is Parse for constants.
func MustParse(s string) RGB {
	c, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return c
}

// String is the lower-case "#rrggbb" form, the only form written into a stylesheet.
func (c RGB) String() string { return fmt.Sprintf("#%02x%02x%02x", c.R, c.G, c.B) }

// Luminance is the relative luminance of WCAG 2.x: 0 for black, 1 for white.
func (c RGB) Luminance() float64 {
	return 0.2126*linear(c.R) + 0.7152*linear(c.G) + 0.0722*linear(c.B)
}

// linear undoes the sRGB transfer function, with the 0.04045 threshold of the sRGB standard
// (WCAG 2.x prints 0.03928; no 8-bit value lies between the two, so the results are equal).
func linear(v uint8) float64 {
	s := float64(v) / 255
	if s <= 0.04045 {
		return s / 12.92
	}
	return math.Pow((s+0.055)/1.055, 2.4)
}

// Contrast is the WCAG 2.x contrast ratio of two colours, from 1 (equal) to 21 (black on
// white); the order does not matter.
func Contrast(a, b RGB) float64 {
	la, lb := a.Luminance(), b.Luminance()
	if la < lb {
		la, lb = lb, la
	}
	return (la + 0.05) / (lb + 0.05)
}

// Mix moves c towards target by t (0 keeps c, 1 gives target), channel by channel in sRGB, as
// CSS color-mix(in srgb) does.
func Mix(c, target RGB, t float64) RGB {
	m := func(a, b uint8) uint8 { return uint8(math.Round(float64(a) + (float64(b)-float64(a))*t)) }
	return RGB{m(c.R, target.R), m(c.G, target.G), m(c.B, target.B)}
}

// Ratio formats a contrast ratio as WCAG writes it, rounded down so that a colour is never
// reported as passing when it fails ("4.49:1", not "4.5:1").
func Ratio(r float64) string {
	return strconv.FormatFloat(math.Floor(r*100)/100, 'f', 2, 64) + ":1"
}
