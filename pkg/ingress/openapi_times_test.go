package ingress_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/ingress"
	"github.com/agentbus/agentbus/pkg/timefmt"
)

// TestOpenAPITimesAreTimestamps: every time the document describes in an answer or an event is
// its Timestamp schema, whose pattern is package timefmt's form (UTC, three fractional digits),
// so that the check of every test's answers (openapitraffic_test.go) and of every delivered event
// holds each time to that form. Only parameters, which take any RFC 3339 time, are plain
// date-times.
func TestOpenAPITimesAreTimestamps(t *testing.T) {
	t.Parallel()
	var doc map[string]any
	require.NoError(t, json.Unmarshal(ingress.OpenAPIDocument(), &doc))
	schemas, _ := doc["components"].(map[string]any)["schemas"].(map[string]any)
	ts, ok := schemas["Timestamp"].(map[string]any)
	require.True(t, ok, "the document has no components.schemas.Timestamp")
	assert.Equal(t, map[string]any{"type": "string", "format": "date-time", "pattern": timefmt.Pattern, "description": ts["description"]}, ts)

	var plain []string
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			if v["format"] == "date-time" && path != "/components/schemas/Timestamp" && !strings.Contains(path, "/parameters/") {
				plain = append(plain, path)
			}
			for k, e := range v {
				walk(path+"/"+pointerToken(k), e)
			}
		case []any:
			for i, e := range v {
				walk(path+"/"+strconv.Itoa(i), e)
			}
		}
	}
	walk("", doc)
	assert.Empty(t, plain, "date-times that are not {\"$ref\": \"#/components/schemas/Timestamp\"}")
	assert.Contains(t, string(ingress.OpenAPIDocument()), `"#/components/schemas/Timestamp"`)
}
