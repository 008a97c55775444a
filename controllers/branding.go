package controllers

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/internal/colour"
	"latchkey.dev/latchkey/internal/config"
)

// The colours a Project's accent is drawn with or against on the pages
// (webhook/pages/static/latchkey.css). A button's label sits on the accent, and the button sits
// on the card.
var (
	white        = colour.MustParse("#ffffff") // light mode: button text and the card
	darkText     = colour.MustParse("#0b1020") // dark mode: button text
	darkCard     = colour.MustParse("#1d2125") // dark mode: the card
	black        = colour.MustParse("#000000")
	textRatio    = 4.5 // WCAG 2.2 AA 1.4.3, text of normal size
	controlRatio = 3.0 // WCAG 2.2 AA 1.4.11, what shows where a control is
)

// compileBranding compiles spec.branding. A logo or colour that cannot be used is left out, and
// the Project is Degraded saying why; the pages show Latchkey's default look instead. It never
// stops the Project serving: a look is not worth an outage (docs/decisions/0043).
func (r *resolver) compileBranding(ctx context.Context, p *v1alpha1.Project, out *config.Project, off *degraded) error {
	b := p.Spec.Branding
	if b == nil {
		return nil
	}
	out.Branding.SupportURL = b.SupportURL
	if b.AccentColor != "" {
		c, err := checkAccent("spec.branding.accentColor", b.AccentColor, []contrastCheck{
			{white, textRatio, "the white button text"},
			{white, controlRatio, "the white card"},
		})
		if err != nil {
			off.addLook(err, "the default accent colour")
		} else {
			out.Branding.Accent = c.String()
			// Darker on hover: its contrast with the white text only grows.
			out.Branding.AccentHover = colour.Mix(c, black, 0.15).String()
		}
	}
	if b.DarkAccentColor != "" {
		c, err := checkAccent("spec.branding.darkAccentColor", b.DarkAccentColor, []contrastCheck{
			{darkText, textRatio, "the dark button text (#0b1020)"},
			{darkCard, controlRatio, "the dark card (#1d2125)"},
		})
		if err != nil {
			off.addLook(err, "the default dark-mode accent colour")
		} else {
			out.Branding.DarkAccent = c.String()
			// Lighter on hover: its contrast with the dark text and card only grows.
			out.Branding.DarkAccentHover = colour.Mix(c, white, 0.15).String()
		}
	}
	if b.Logo != nil {
		logo, err := r.logo(ctx, p.Namespace, *b.Logo)
		if err != nil {
			nr, ok := asNotReady(err)
			if !ok {
				return err
			}
			off.addLook(nr, "no logo")
		}
		out.Branding.Logo = logo
	}
	return nil
}

// addLook records err as a problem with the Project's branding; the pages show instead.
func (d *degraded) addLook(err *notReady, instead string) {
	d.problems = append(d.problems, err)
	d.looks = append(d.looks, instead)
}

type contrastCheck struct {
	against colour.RGB
	min     float64
	what    string
}

// checkAccent parses an accent colour and checks it against what it is drawn with.
func checkAccent(field, value string, checks []contrastCheck) (colour.RGB, *notReady) {
	c, err := colour.Parse(value)
	if err != nil {
		// CEL admits only #rrggbb; this is for an object stored before the rule existed.
		return c, notReadyf(v1alpha1.ProjectAccentColorLowContrastReason, "%s: %v", field, err)
	}
	for _, ch := range checks {
		if got := colour.Contrast(c, ch.against); got < ch.min {
			return c, notReadyf(v1alpha1.ProjectAccentColorLowContrastReason,
				"%s %s has a contrast ratio of %s against %s; WCAG 2.2 AA needs at least %s",
				field, c, colour.Ratio(got), ch.what, colour.Ratio(ch.min))
		}
	}
	return c, nil
}

// logo reads and checks a Project's logo. The image's type is sniffed from its bytes: only PNG
// and WebP are served. SVG is refused because an SVG opened on its own runs its script in
// Latchkey's origin, and a raster image carries nothing that runs.
func (r *resolver) logo(ctx context.Context, namespace string, ref v1alpha1.LogoReference) (*config.Logo, error) {
	const field = "spec.branding.logo"
	var (
		data  []byte
		found bool
	)
	switch ref.Kind {
	case v1alpha1.LogoFromConfigMap:
		cm, err := r.configMap(ctx, namespace, ref.Name)
		if err != nil {
			return nil, err
		}
		if cm == nil {
			return nil, notReadyf(v1alpha1.ProjectLogoMissingReason, "ConfigMap %s/%s (%s) not found", namespace, ref.Name, field)
		}
		data, found = cm.BinaryData[ref.Key]
		if !found {
			// The cache keeps no ConfigMap's data (setup.go), so a text entry is not seen.
			return nil, notReadyf(v1alpha1.ProjectLogoMissingReason, "ConfigMap %s/%s (%s) has no binaryData key %q", namespace, ref.Name, field, ref.Key)
		}
	default:
		sec, err := r.optionalSecret(ctx, namespace, ref.Name)
		if err != nil {
			return nil, err
		}
		if sec == nil {
			return nil, notReadyf(v1alpha1.ProjectLogoMissingReason, "Secret %s/%s (%s) not found, or not labelled %s", namespace, ref.Name, field, v1alpha1.SecretUseLabel)
		}
		data, found = sec.Data[ref.Key]
		if !found {
			return nil, notReadyf(v1alpha1.ProjectLogoMissingReason, "Secret %s/%s (%s) has no key %q", namespace, ref.Name, field, ref.Key)
		}
	}
	where := fmt.Sprintf("%s %s/%s key %q (%s)", ref.Kind, namespace, ref.Name, ref.Key, field)
	if len(data) > config.LogoMaxBytes {
		return nil, notReadyf(v1alpha1.ProjectLogoInvalidReason, "%s is larger than %d KiB", where, config.LogoMaxBytes>>10)
	}
	typ := sniffImage(data)
	if typ == "" {
		return nil, notReadyf(v1alpha1.ProjectLogoInvalidReason, "%s is not a PNG or WebP image (SVG is not accepted: it can carry script)", where)
	}
	sum := sha256.Sum256(data)
	return &config.Logo{Data: bytes.Clone(data), ContentType: typ, Hash: hex.EncodeToString(sum[:])}, nil
}

// sniffImage returns the type of a PNG or WebP image from its signature, or "".
func sniffImage(b []byte) string {
	switch {
	case bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")):
		return "image/png"
	case len(b) >= 16 && bytes.Equal(b[:4], []byte("RIFF")) && bytes.Equal(b[8:15], []byte("WEBPVP8")):
		return "image/webp"
	}
	return ""
}

// configMap returns a ConfigMap, or nil when it does not exist.
func (r *resolver) configMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error) {
	key := types.NamespacedName{Namespace: namespace, Name: name}
	r.configMaps[key] = struct{}{}
	cm := &corev1.ConfigMap{}
	if err := r.c.Get(ctx, key, cm, noCopy); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading ConfigMap %s: %w", key, err)
	}
	return cm, nil
}
