// Package docs_test checks the repository's Markdown: every relative link names a file that
// exists, and every #fragment a heading of the file it points to; the short pages stay short.
package docs_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	// inlineLink matches the target of an inline link or image: [text](target).
	inlineLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	// codeSpan matches inline code, whose text is no link.
	codeSpan = regexp.MustCompile("`[^`]*`")
	heading  = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	// headingLink is a link in a heading, of which the anchor keeps the text.
	headingLink = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	scheme      = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// Every relative link in the repository's Markdown resolves: its file exists, and its fragment
// is the anchor of a heading of that file (as GitHub makes anchors).
func TestMarkdownLinksResolve(t *testing.T) {
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	var files []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(d.Name(), ".md") {
			files = append(files, path)
		}
		return nil
	})
	require.NoError(t, err)
	require.NotEmpty(t, files)

	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		a := map[string]bool{}
		seen := map[string]int{}
		for _, line := range prose(t, path) {
			m := heading.FindStringSubmatch(line.text)
			if m == nil {
				continue
			}
			slug := slugOf(headingLink.ReplaceAllString(m[1], "$1"))
			if n := seen[slug]; n > 0 {
				a[fmt.Sprintf("%s-%d", slug, n)] = true
			} else {
				a[slug] = true
			}
			seen[slug]++
		}
		anchors[path] = a
		return a
	}

	checked := 0
	for _, file := range files {
		rel, _ := filepath.Rel(root, file)
		for _, line := range prose(t, file) {
			for _, m := range inlineLink.FindAllStringSubmatch(codeSpan.ReplaceAllString(line.text, ""), -1) {
				target := m[1]
				if scheme.MatchString(target) {
					continue // a URL, not a file of the repository
				}
				checked++
				path, frag, _ := strings.Cut(target, "#")
				dest := file
				if path != "" {
					dest = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
				}
				if _, err := os.Stat(dest); err != nil {
					assert.Failf(t, "a link to a missing file", "%s:%d: %s", rel, line.n, target)
					continue
				}
				if frag != "" && strings.HasSuffix(dest, ".md") && !anchorsOf(dest)[frag] {
					assert.Failf(t, "a link to a missing heading", "%s:%d: %s", rel, line.n, target)
				}
			}
		}
	}
	t.Logf("%d relative links in %d Markdown files", checked, len(files))
}

// line is a line of a Markdown file and its number.
type line struct {
	n    int
	text string
}

// prose returns the lines of a Markdown file outside fenced code blocks.
func prose(t *testing.T, path string) []line {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var out []line
	fence := ""
	for i, text := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimSpace(text)
		switch {
		case fence != "":
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
		case strings.HasPrefix(trimmed, "```"), strings.HasPrefix(trimmed, "~~~"):
			fence = trimmed[:3]
		default:
			out = append(out, line{i + 1, text})
		}
	}
	return out
}

// slugOf is the anchor GitHub gives a heading: lower case, spaces as hyphens, punctuation other
// than hyphens and underscores left out, code marks too.
func slugOf(h string) string {
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

// The layout in development.md names every directory of services/, pkg/ and sdk/ (those two
// levels deep in pkg/agents/), and nothing that is gone.
func TestLayoutNamesEveryPackage(t *testing.T) {
	b, err := os.ReadFile("development.md")
	require.NoError(t, err)
	doc := string(b)
	start := strings.Index(doc, "## Repository layout")
	require.GreaterOrEqual(t, start, 0)
	listed := map[string]bool{}
	for _, l := range strings.Split(doc[start:], "\n") {
		if f := strings.Fields(l); len(f) > 0 && strings.HasSuffix(f[0], "/") {
			listed[f[0]] = true
		}
	}
	for _, top := range []string{"services", "pkg", "sdk"} {
		entries, err := os.ReadDir(filepath.Join("..", top))
		require.NoError(t, err)
		for _, e := range entries {
			if !e.IsDir() || e.Name() == "agents" {
				continue
			}
			dir := top + "/" + e.Name() + "/"
			assert.True(t, listed[dir], "development.md's layout does not name %s", dir)
		}
	}
	agents, err := os.ReadDir(filepath.Join("..", "pkg", "agents"))
	require.NoError(t, err)
	for _, e := range agents {
		if e.IsDir() {
			assert.True(t, listed["pkg/agents/"+e.Name()+"/"], "development.md's layout does not name pkg/agents/%s/", e.Name())
		}
	}
	for dir := range listed {
		_, err := os.Stat(filepath.Join("..", filepath.FromSlash(dir)))
		assert.NoError(t, err, "development.md's layout names %s", dir)
	}
}

// TestShortPages: the README is a newcomer's path and performance.md the current figures; each
// stays within 250 lines, detail going to the pages they link and the figures' history to
// CHANGELOG.md.
func TestShortPages(t *testing.T) {
	for _, page := range []string{filepath.Join("..", "README.md"), "performance.md"} {
		b, err := os.ReadFile(page)
		require.NoError(t, err)
		lines := strings.Count(string(b), "\n")
		assert.LessOrEqual(t, lines, 250, "%s has %d lines", page, lines)
	}
}
