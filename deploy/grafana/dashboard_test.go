// Package grafana_test checks the Grafana dashboard statically: it is valid JSON, every panel
// queries something, and every agentbus metric it queries is documented in docs/metrics.md, so
// that a renamed metric cannot leave a panel silently empty. The tests of pkg/agent and
// pkg/ingress check, in turn, that every metric the code serves is documented there.
package grafana_test

import (
	"encoding/json"
	"os"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type panel struct {
	Type    string `json:"type"`
	Title   string `json:"title"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

var (
	metricRE = regexp.MustCompile(`agentbus_[a-z_]+`)
	// Histogram series carry suffixes that the documentation does not list.
	histogramSuffixRE = regexp.MustCompile(`_(bucket|sum|count)$`)
)

func TestDashboard(t *testing.T) {
	b, err := os.ReadFile("agentbus.json")
	require.NoError(t, err)
	var dash struct {
		UID    string  `json:"uid"`
		Panels []panel `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(b, &dash))
	assert.NotEmpty(t, dash.UID)
	doc, err := os.ReadFile("../../docs/metrics.md")
	require.NoError(t, err)

	queried := make(map[string]bool)
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		assert.NotEmpty(t, p.Targets, "panel %q queries nothing", p.Title)
		for _, tg := range p.Targets {
			for _, name := range metricRE.FindAllString(tg.Expr, -1) {
				name = histogramSuffixRE.ReplaceAllString(name, "")
				queried[name] = true
				assert.Contains(t, string(doc), "`"+name+"`", "panel %q queries %s, which docs/metrics.md does not document", p.Title, name)
			}
		}
	}
	for _, name := range []string{
		"agentbus_http_requests_total", "agentbus_http_request_duration_seconds",
		"agentbus_handler_duration_seconds", "agentbus_handler_outcomes_total", "agentbus_dead_letters_total",
		"agentbus_inbox_pending", "agentbus_partitions_owned", "agentbus_instances_live",
		"agentbus_redeliveries_total", "agentbus_ingress_sync_calls_waiting", "agentbus_ingress_handler_timeouts_total",
	} {
		assert.True(t, queried[name], "the dashboard has no panel of %s", name)
	}
}
