package ingress_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/ingress"
	"github.com/agentbus/agentbus/pkg/problem"
)

// documentedProblem is one slug of a problem-type table of docs/errors.md, with the statuses
// its row's status cell names.
type documentedProblem struct {
	slug     string
	statuses []int
	// row is the slug's place among the slugs of its row, whose status cell may name one
	// status for each ("403, 400, 400").
	row, rowLen int
}

var (
	tableSlug   = regexp.MustCompile("`([a-z]+(?:-[a-z]+)*)`")
	tableStatus = regexp.MustCompile(`\b[1-5][0-9]{2}\b`)
)

// errorsDocProblems reads the problem-type tables of docs/errors.md: the rows of the tables
// under "## Problem types", whose first cell holds slugs and second their status.
func errorsDocProblems(t *testing.T) []documentedProblem {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "errors.md"))
	require.NoError(t, err)
	doc := string(b)
	start := strings.Index(doc, "\n## Problem types")
	require.GreaterOrEqual(t, start, 0, "docs/errors.md has no Problem types section")
	section := doc[start+1:]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	var out []documentedProblem
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		var statuses []int
		for _, s := range tableStatus.FindAllString(cells[2], -1) {
			n, _ := strconv.Atoi(s)
			statuses = append(statuses, n)
		}
		slugs := tableSlug.FindAllStringSubmatch(cells[1], -1)
		for i, m := range slugs {
			out = append(out, documentedProblem{slug: m[1], statuses: statuses, row: i, rowLen: len(slugs)})
		}
	}
	require.NotEmpty(t, out, "no problem types found in docs/errors.md")
	return out
}

// TestProblemTypesDocumented: docs/errors.md describes every problem type of pkg/problem with its
// status, and no other.
func TestProblemTypesDocumented(t *testing.T) {
	t.Parallel()
	documented := map[string]bool{}
	for _, d := range errorsDocProblems(t) {
		documented[d.slug] = true
		pt, ok := problem.Lookup(d.slug)
		if !assert.True(t, ok, "docs/errors.md describes %q, which pkg/problem does not define", d.slug) {
			continue
		}
		switch {
		case len(d.statuses) == d.rowLen && d.rowLen > 1:
			assert.Equal(t, pt.Status, d.statuses[d.row], "docs/errors.md: status of %q", d.slug)
		default:
			assert.Contains(t, d.statuses, pt.Status, "docs/errors.md: status of %q", d.slug)
		}
	}
	for _, pt := range problem.Types() {
		assert.True(t, documented[pt.Slug], "docs/errors.md does not describe %q (%d)", pt.Slug, pt.Status)
	}
}

// TestProblemTypesInOpenAPI: the OpenAPI document's Problem schema admits exactly the type URIs
// of pkg/problem's types, so that the traffic check refuses an answer of any other type.
func TestProblemTypesInOpenAPI(t *testing.T) {
	t.Parallel()
	var doc struct {
		Components struct {
			Schemas struct {
				Problem struct {
					Properties struct {
						Type struct {
							Enum []string `json:"enum"`
						} `json:"type"`
					} `json:"properties"`
				} `json:"Problem"`
			} `json:"schemas"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(ingress.OpenAPIDocument(), &doc))
	var want []string
	for _, pt := range problem.Types() {
		want = append(want, pt.URI())
	}
	got := slices.Sorted(slices.Values(doc.Components.Schemas.Problem.Properties.Type.Enum))
	assert.Equal(t, want, got, "components.schemas.Problem.properties.type.enum of pkg/ingress/openapi.json")
}
