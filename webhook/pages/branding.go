package pages

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"reflect"
	"strings"
	"unicode/utf8"

	"latchkey.dev/latchkey/internal/colour"
	"latchkey.dev/latchkey/internal/config"
)

// A Project's own look (docs/branding.md) reaches its pages through the response writer: the
// router wraps the writer of every page under an issuer with Branded, and render finds it
// there. So every page of the Project, including one added later, gets the look without each
// handler passing it on, and a page outside any Project (the server-wide 404) keeps the default.
//
// What a Project may change is narrow on purpose: the accent colour of the main buttons (a
// per-Project stylesheet that sets --accent and --accent-hover, nothing else), a logo beside its
// display name in the header, and a Help link in the footer. The "Where access goes" panel, the
// warning and alert colours and the wording of every security check use fixed colours and fixed
// text that no Project setting reaches.

// BrandingPath is where, under an issuer, a Project's logo and stylesheet are served.
const BrandingPath = "/branding/"

// maxNameRunes bounds a display name on a page (the API allows 100 characters).
const maxNameRunes = 100

type brandedWriter struct {
	http.ResponseWriter
	base string // the issuer's path, "/team/demo"
	b    *config.Branding
}

func (bw *brandedWriter) Unwrap() http.ResponseWriter { return bw.ResponseWriter }

// Branded returns w carrying a Project's branding for the pages rendered to it. issuerPath is
// the Project's issuer path ("/team/demo"); b is its compiled, validated branding.
func Branded(w http.ResponseWriter, issuerPath string, b *config.Branding) http.ResponseWriter {
	return &brandedWriter{ResponseWriter: w, base: issuerPath, b: b}
}

// brandingOf finds the branding Branded put on w, unwrapping what middleware wrapped around it.
func brandingOf(w http.ResponseWriter) *brandedWriter {
	for w != nil {
		if bw, ok := w.(*brandedWriter); ok {
			return bw
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return nil
		}
		w = u.Unwrap()
	}
	return nil
}

// Brand is what the layout shows of a Project's branding. Every field is "" for the default
// look.
type Brand struct {
	// ThemeURL is the Project's stylesheet (accent colours), loaded after latchkey.css.
	ThemeURL string
	// LogoURL is the Project's logo, shown beside its display name.
	LogoURL string
	// SupportURL is the target of the footer's Help link (https only).
	SupportURL string
}

// theme is a Project's stylesheet and its address; ok is false when it sets nothing.
func theme(b *config.Branding) (css []byte, name string, ok bool) {
	// The colours were checked by the operator; parsing them again keeps anything but #rrggbb
	// out of the stylesheet whatever reaches this point.
	hex6 := func(s string) string {
		if c, err := colour.Parse(s); err == nil {
			return c.String()
		}
		return ""
	}
	var sb strings.Builder
	sb.WriteString("/* This Project's accent colours, checked for WCAG 2.2 AA contrast (docs/branding.md). */\n")
	if a, h := hex6(b.Accent), hex6(b.AccentHover); a != "" && h != "" {
		sb.WriteString("@media (prefers-color-scheme: light) { :root { --accent: " + a + "; --accent-hover: " + h + "; } }\n")
		ok = true
	}
	if a, h := hex6(b.DarkAccent), hex6(b.DarkAccentHover); a != "" && h != "" {
		sb.WriteString("@media (prefers-color-scheme: dark) { :root { --accent: " + a + "; --accent-hover: " + h + "; } }\n")
		ok = true
	}
	if !ok {
		return nil, "", false
	}
	css = []byte(sb.String())
	sum := sha256.Sum256(css)
	return css, "theme-" + hex.EncodeToString(sum[:8]) + ".css", true
}

// logoName is the logo's file name under BrandingPath: its hash, so that the address changes
// whenever the image does, and the extension of its sniffed type.
func logoName(l *config.Logo) string {
	ext := ".png"
	if l.ContentType == "image/webp" {
		ext = ".webp"
	}
	return "logo-" + l.Hash[:16] + ext
}

func (bw *brandedWriter) brand() Brand {
	var out Brand
	if bw == nil || bw.b == nil {
		return out
	}
	if _, name, ok := theme(bw.b); ok {
		out.ThemeURL = bw.base + BrandingPath + name
	}
	if l := bw.b.Logo; l != nil && len(l.Hash) >= 16 {
		out.LogoURL = bw.base + BrandingPath + logoName(l)
	}
	if strings.HasPrefix(bw.b.SupportURL, "https://") {
		out.SupportURL = bw.b.SupportURL
	}
	return out
}

var frameType = reflect.TypeFor[Frame]()

// framed returns data with its Frame completed for w: the Project's branding, and a display
// name no longer than maxNameRunes. data is a page's value type embedding Frame.
func framed(w http.ResponseWriter, data any) any {
	v := reflect.ValueOf(data)
	if v.Kind() != reflect.Struct {
		return data
	}
	f, ok := v.Type().FieldByName("Frame")
	if !ok || f.Type != frameType || len(f.Index) != 1 {
		return data
	}
	c := reflect.New(v.Type()).Elem()
	c.Set(v)
	fr := c.Field(f.Index[0]).Interface().(Frame)
	fr.brand = brandingOf(w).brand()
	fr.Project = limitRunes(fr.Project, maxNameRunes)
	c.Field(f.Index[0]).Set(reflect.ValueOf(fr))
	return c.Interface()
}

func limitRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// BrandingAsset serves a Project's logo and stylesheet. The file name carries the content's
// hash, so a response never changes and may be cached for a year by anyone: neither holds
// anything about a person. Any other name, including the hash of another Project's logo, is the
// ordinary 404.
func (p *Pages) BrandingAsset(w http.ResponseWriter, r *http.Request) {
	bw := brandingOf(w)
	file := r.PathValue("file")
	var (
		body []byte
		typ  string
	)
	if bw != nil && bw.b != nil {
		if css, name, ok := theme(bw.b); ok && file == name {
			body, typ = css, "text/css; charset=utf-8"
		}
		if l := bw.b.Logo; l != nil && len(l.Hash) >= 16 && file == logoName(l) {
			body, typ = l.Data, l.ContentType
		}
	}
	if body == nil {
		p.NotFound(w)
		return
	}
	h := w.Header()
	h.Del("Pragma")
	h.Set("Cache-Control", "public, max-age=31536000, immutable")
	h.Set("Content-Type", typ)
	// Opened on its own, the response runs nothing and cannot be framed.
	h.Set("Content-Security-Policy", "default-src 'none'; sandbox; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		w.Write(body)
	}
}
