//go:build !latchkey_local

package controllers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/internal/config"
)

// testPNG is a small, real PNG.
func testPNG(t *testing.T) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, 8, 8))
	img.Set(1, 1, color.RGBA{R: 200, A: 255})
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestProjectBranding: a Project's branding compiles into the snapshot; a logo that is missing,
// too large or not PNG/WebP, and an accent colour that fails WCAG AA contrast, each make the
// Project Degraded with their own reason and leave the pages their default look, while the
// Project keeps serving.
func TestProjectBranding(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t, nil)
	p := newProject(t, ns, "proj", nil)
	logo := testPNG(t)
	update(t, p, func(p *v1alpha1.Project) {
		p.Spec.Branding = &v1alpha1.Branding{
			Logo:            &v1alpha1.LogoReference{Kind: v1alpha1.LogoFromConfigMap, Name: "brand", Key: "logo.png"},
			AccentColor:     "#0B6E4F",
			DarkAccentColor: "#5fd3a7",
			SupportURL:      "https://help.example.com/latchkey",
		}
	})
	branding := func(check func(b config.Branding) error) {
		t.Helper()
		waitSnapshot(t, "branding", func(s *config.Snapshot) error {
			pr := s.Project(ns + "/proj")
			if pr == nil {
				return errors.New("project not serving")
			}
			return check(pr.Branding)
		})
	}

	// The ConfigMap does not exist yet: Degraded, serving, no logo, the colours in use.
	cond := waitDegraded(t, p, v1alpha1.ProjectLogoMissingReason)
	if !strings.Contains(cond.Message, "ConfigMap "+ns+"/brand") || !strings.Contains(cond.Message, "the pages show no logo until it is fixed") {
		t.Errorf("message %q", cond.Message)
	}
	branding(func(b config.Branding) error {
		if b.Logo != nil || b.Accent != "#0b6e4f" || b.DarkAccent != "#5fd3a7" || b.SupportURL != "https://help.example.com/latchkey" {
			return fmt.Errorf("%+v", b)
		}
		return nil
	})

	// The logo arrives: Complete, and the snapshot holds it with its sniffed type and hash.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "brand"}, BinaryData: map[string][]byte{"logo.png": logo}}
	create(t, cm)
	waitComplete(t, p)
	branding(func(b config.Branding) error {
		if b.Logo == nil || b.Logo.ContentType != "image/png" || !bytes.Equal(b.Logo.Data, logo) || len(b.Logo.Hash) != 64 {
			return fmt.Errorf("logo %+v", b.Logo)
		}
		return nil
	})

	// Wrong type (an SVG, which can carry script) and too large: LogoInvalid, no logo served.
	for _, tc := range []struct {
		name, want string
		data       []byte
	}{
		{"svg", "is not a PNG or WebP image (SVG is not accepted: it can carry script)", []byte(`<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>`)},
		{"too large", "is larger than 64 KiB", append(bytes.Clone(logo), make([]byte, config.LogoMaxBytes)...)},
	} {
		name := tc.name
		update(t, cm, func(cm *corev1.ConfigMap) { cm.BinaryData["logo.png"] = tc.data })
		eventually(t, name, func() error {
			cond := waitDegraded(t, p, v1alpha1.ProjectLogoInvalidReason)
			if !strings.Contains(cond.Message, tc.want) {
				return fmt.Errorf("message %q", cond.Message)
			}
			return nil
		})
		branding(func(b config.Branding) error {
			if b.Logo != nil {
				return errors.New(name + ": logo still served")
			}
			return nil
		})
	}

	// From a Secret instead, as WebP; and a light accent that fails 4.5:1 against white text.
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "brand-secret", Labels: forProject()},
		Data: map[string][]byte{"logo": append([]byte("RIFF\x1a\x00\x00\x00WEBPVP8L"), make([]byte, 12)...)}})
	update(t, p, func(p *v1alpha1.Project) {
		p.Spec.Branding.Logo = &v1alpha1.LogoReference{Kind: v1alpha1.LogoFromSecret, Name: "brand-secret", Key: "logo"}
		p.Spec.Branding.AccentColor = "#e5a500"
	})
	cond = waitDegraded(t, p, v1alpha1.ProjectAccentColorLowContrastReason)
	if !strings.Contains(cond.Message, "spec.branding.accentColor #e5a500 has a contrast ratio of 2.16:1 against the white button text; WCAG 2.2 AA needs at least 4.50:1") ||
		!strings.Contains(cond.Message, "the pages show the default accent colour until it is fixed") {
		t.Errorf("message %q", cond.Message)
	}
	branding(func(b config.Branding) error {
		if b.Accent != "" || b.AccentHover != "" || b.DarkAccent != "#5fd3a7" || b.Logo == nil || b.Logo.ContentType != "image/webp" {
			return fmt.Errorf("%+v", b)
		}
		return nil
	})

	// A dark accent too dark for the dark card.
	update(t, p, func(p *v1alpha1.Project) {
		p.Spec.Branding.AccentColor = ""
		p.Spec.Branding.DarkAccentColor = "#2454d6"
	})
	cond = waitDegraded(t, p, v1alpha1.ProjectAccentColorLowContrastReason)
	if !strings.Contains(cond.Message, "spec.branding.darkAccentColor #2454d6") {
		t.Errorf("message %q", cond.Message)
	}
}

// TestBrandingValidation: the API server refuses what CEL can tell is wrong.
func TestBrandingValidation(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t, nil)
	for name, b := range map[string]v1alpha1.Branding{
		"http support link":  {SupportURL: "http://help.example.com"},
		"javascript link":    {SupportURL: "javascript:alert(1)"},
		"named colour":       {AccentColor: "red"},
		"short colour":       {DarkAccentColor: "#fff"},
		"logo of other kind": {Logo: &v1alpha1.LogoReference{Kind: "Pod", Name: "x", Key: "y"}},
	} {
		p := &v1alpha1.Project{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p-" + randomSuffix()},
			Spec: v1alpha1.ProjectSpec{
				SignIn:   v1alpha1.SignIn{PasswordSecretRef: &v1alpha1.SecretKeyReference{Name: "pw", Key: "k"}},
				Branding: &b,
			},
		}
		if err := k8s.Create(context.Background(), p); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
