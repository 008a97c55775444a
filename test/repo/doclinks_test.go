package repo

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

var (
	fence    = regexp.MustCompile("(?ms)^\\s*```.*?\\n\\s*```")
	heading  = regexp.MustCompile(`(?m)^#{1,6} (.*)$`)
	inline   = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	htmlID   = regexp.MustCompile(`<a (?:name|id)="([^"]+)"`)
	mdLink   = regexp.MustCompile(`\]\(([^)\s#]*)(?:#([^)\s]+))?\)`)
	skipDirs = map[string]bool{".git": true, "node_modules": true, "bin": true, ".latchkey": true}
)

// slug is GitHub's anchor for a heading: lower case, punctuation other than - and _ dropped,
// spaces as dashes.
func slug(h string) string {
	h = inline.ReplaceAllString(h, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestDocLinks: every relative link in the repository's Markdown reaches a file that exists
// and, when it names an anchor of a Markdown file, a heading of that file. Pages are renamed
// and sections move; a reader following a link should not land nowhere.
func TestDocLinks(t *testing.T) {
	root := "../.."
	anchors := map[string]map[string]bool{}
	var pages []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && skipDirs[d.Name()] {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			pages = append(pages, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	read := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return fence.ReplaceAllString(string(b), "")
	}
	for _, p := range pages {
		s := read(p)
		set := map[string]bool{}
		seen := map[string]int{}
		for _, m := range heading.FindAllStringSubmatch(s, -1) {
			a := slug(m[1])
			if n := seen[a]; n > 0 {
				set[a+"-"+strconv.Itoa(n)] = true
			}
			seen[a]++
			set[a] = true
		}
		for _, m := range htmlID.FindAllStringSubmatch(s, -1) {
			set[m[1]] = true
		}
		anchors[filepath.Clean(p)] = set
	}
	for _, p := range pages {
		for _, m := range mdLink.FindAllStringSubmatch(read(p), -1) {
			target, anchor := m[1], m[2]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			dest := filepath.Clean(p)
			if target != "" {
				dest = filepath.Join(filepath.Dir(p), target)
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s: link to %s: no such file", rel(p), target)
					continue
				}
			}
			if anchor != "" && strings.HasSuffix(dest, ".md") && !anchors[dest][anchor] {
				t.Errorf("%s: link to %s#%s: no such heading", rel(p), target, anchor)
			}
		}
	}
}

func rel(p string) string { return strings.TrimPrefix(filepath.ToSlash(p), "../../") }
