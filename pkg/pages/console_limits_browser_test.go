package pages_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/agents/echo"
	"github.com/agentbus/agentbus/pkg/browsertest"
	"github.com/agentbus/agentbus/pkg/stacktest"
)

// getJSON reads a route of the stack with key and decodes its answer into v.
func getJSON(t *testing.T, s *stacktest.Stack, key, path string, v any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, s.URL+path, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, path)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(v))
}

// TestConsoleLimitsInBrowser drives the console's Limits page in a headless Chromium against a
// whole stack: tenant default's Echo instances, and Slow, an agent that runs one request at a
// time and holds each until the test lets it go. With a system-admin key it checks the limits
// table of a tenant with nothing set, the usage against the quotas, a value the API refuses
// (its problem shown, the field marked), limits saved through the form and shown as holding
// (and by the API, and in the usage's quota); then a queue of Slow's requests (one running,
// three queued) in the figures and the chart, sampled from the hosts view, and its end. With a
// tenant-admin key the page shows the same limits without the form.
func TestConsoleLimitsInBrowser(t *testing.T) {
	ctx, problems := browsertest.Start(t, 3*time.Minute)
	const adminKey = "sys_console_limits_key_0123456789abcdef"

	gate := make(chan struct{})
	var open sync.Once
	release := func() { open.Do(func() { close(gate) }) }
	slow := agent.New("Slow", agent.Tenants("default"), agent.MaxConcurrent(1))
	slow.DataFunc("work", func(ctx context.Context, _ *agent.Message) (agent.Reply, error) {
		select {
		case <-gate:
		case <-ctx.Done():
			return agent.Reply{}, ctx.Err()
		}
		return agent.Answer(map[string]bool{"done": true}), nil
	})
	s := stacktest.Start(t, stacktest.Options{Agents: []*agent.Agent{echo.New(), slow}, AdminKey: adminKey})
	t.Cleanup(release) // before the stack stops

	for _, who := range []string{"alice", "bob", "carol"} {
		require.Equal(t, http.StatusOK, webhook(t, s, s.Key, "default", "Echo", who, "count", nil))
	}

	// ---- a system admin ---------------------------------------------------------------------

	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(s.URL+"/console#/limits"),
		chromedp.WaitVisible(chromedp.ID("key")),
		waitFor(`document.getElementById('limits-error').textContent.startsWith('No key yet')`),
		chromedp.SendKeys(chromedp.ID("key"), adminKey),
		chromedp.Click(chromedp.ID("use-key")),
		waitFor(`document.getElementById('who').textContent.startsWith('System admin')`),
		waitFor(loadedAfter("limits", 0)),
	), "opening the limits page as a system admin; the page's problems: %v", problems())
	holds := func(limit string) string {
		return evaluate[string](t, ctx, fmt.Sprintf(`document.querySelector('#limits-table tr[data-limit=%q] td:nth-child(2)').textContent`, limit))
	}
	set := func(limit string) string {
		return evaluate[string](t, ctx, fmt.Sprintf(`document.querySelector('#limits-table tr[data-limit=%q] td:nth-child(3)').textContent`, limit))
	}
	assert.Equal(t, "Tenant default: nothing is set, the deployment's settings hold.", evaluate[string](t, ctx, `document.getElementById('limits-caption').textContent`))
	assert.Equal(t, "1", holds("weight"))
	assert.Equal(t, "no limit", holds("maxQueued"))
	assert.Equal(t, "not set: the deployment's", set("maxQueued"))
	assert.False(t, evaluate[bool](t, ctx, `document.getElementById('limits-edit').hidden`), "a system admin gets the form")
	assert.Equal(t, "", evaluate[string](t, ctx, `document.getElementById('lim-weight').value`))

	// Usage: Echo's three instances, and the bytes of their history.
	usage := func(name string) string {
		return evaluate[string](t, ctx, fmt.Sprintf(`document.querySelector('[data-usage=%q] .usage-text').textContent`, name))
	}
	require.NoError(t, chromedp.Do(ctx,
		waitFor(`/^3\b/.test(document.querySelector('[data-usage="instances"] .usage-text').textContent)`),
		waitFor(`/^[1-9]/.test(document.querySelector('[data-usage="bytes"] .usage-text').textContent)`),
	), "the usage; the page's problems: %v", problems())
	var before struct {
		Bytes struct{ Total int64 }
		Quota struct{ Bytes int64 }
	}
	getJSON(t, s, adminKey, "/api/v1/admin/tenants/default/usage", &before)
	assert.Positive(t, before.Bytes.Total)
	assert.Regexp(t, `; no quota$| of `, usage("bytes"))
	screenshot(t, ctx, "console-limits-unset.png")

	// A weight the API refuses: its problem is shown, and the field marked.
	require.NoError(t, chromedp.Do(ctx,
		replace("#lim-weight", "0"),
		chromedp.Click(chromedp.ID("lim-save")),
		waitFor(`document.getElementById('limits-action').textContent.includes('400')`),
	), "a refused weight; the page's problems: %v", problems())
	assert.Equal(t, "Not saved: 400 Bad Request: weight must be a whole number from 1 to 1000",
		evaluate[string](t, ctx, `document.getElementById('limits-action').textContent`))
	assert.Equal(t, "true", evaluate[string](t, ctx, `document.getElementById('lim-weight').getAttribute('aria-invalid')`))
	assert.Equal(t, "lim-weight", evaluate[string](t, ctx, `document.activeElement.id`))
	// A quota that is no number is refused before it is sent.
	require.NoError(t, chromedp.Do(ctx,
		replace("#lim-weight", "3"),
		replace("#lim-maxBytes", "lots"),
		chromedp.Click(chromedp.ID("lim-save")),
		waitFor(`document.getElementById('limits-action').textContent.startsWith('Not saved: maxBytes must be')`),
	), "a quota that is no number; the page's problems: %v", problems())
	assert.Equal(t, "true", evaluate[string](t, ctx, `document.getElementById('lim-maxBytes').getAttribute('aria-invalid')`))
	assert.False(t, evaluate[bool](t, ctx, `document.getElementById('lim-weight').hasAttribute('aria-invalid')`))

	// Limits saved through the form hold.
	require.NoError(t, chromedp.Do(ctx,
		replace("#lim-maxBytes", "64 MiB"),
		replace("#lim-maxQueued", "50"),
		replace("#lim-maxConcurrent", "4"),
		replace("#lim-rate", "100"),
		replace("#lim-maxInstances", "1000"),
		replace("#lim-writeRate", "2"),
		replace("#lim-writeBurst", "30"),
		replace("#lim-listenRate", "20"),
		chromedp.Click(chromedp.ID("lim-save")),
		waitFor(`document.getElementById('limits-action').textContent.startsWith('Saved for tenant default')`),
	), "saving the limits; the page's problems: %v", problems())
	assert.Equal(t, "Saved for tenant default: every ingress instance applies it.", evaluate[string](t, ctx, `document.getElementById('limits-action').textContent`))
	assert.Equal(t, "3", holds("weight"))
	assert.Equal(t, "50", holds("maxQueued"))
	assert.Equal(t, "50", set("maxQueued"))
	assert.Equal(t, "4", holds("maxConcurrent"))
	assert.Regexp(t, `^100/s, burst `, holds("rate"))
	assert.Equal(t, "64 MiB", holds("maxBytes"))
	assert.Equal(t, "1000", holds("maxInstances"))
	assert.Equal(t, "not set: the deployment's", set("keyRate"))
	assert.Equal(t, "2.00/s, burst 30", holds("writeRate"))
	assert.Equal(t, "20/s, burst 40", holds("listenRate"))
	assert.Contains(t, evaluate[string](t, ctx, `document.getElementById('limits-caption').textContent`), "by admin")
	assert.Equal(t, "64 MiB", evaluate[string](t, ctx, `document.getElementById('lim-maxBytes').value`), "the form shows what was set")
	var rec struct {
		Effective struct {
			Weight, MaxQueued, MaxConcurrent int
			MaxBytes                         int64
		}
	}
	getJSON(t, s, adminKey, "/api/v1/admin/tenants/default/limits", &rec)
	assert.Equal(t, 3, rec.Effective.Weight)
	assert.Equal(t, 50, rec.Effective.MaxQueued)
	assert.Equal(t, 4, rec.Effective.MaxConcurrent)
	assert.Equal(t, int64(64<<20), rec.Effective.MaxBytes)
	// The usage's quota is the one set, with a meter.
	require.NoError(t, chromedp.Do(ctx,
		waitFor(`document.querySelector('[data-usage="bytes"] .usage-text').textContent.includes(' of 64 MiB (')`),
		waitFor(`document.querySelector('[data-usage="instances"] .usage-text').textContent.startsWith('3 of 1000 (')`),
	), "the usage against the quotas set; the page's problems: %v", problems())
	assert.Regexp(t, `^[0-9.]+ (B|KiB|MiB) of 64 MiB \((under )?[0-9.]+ %\)$`, usage("bytes"))
	assert.Equal(t, float64(64<<20), evaluate[float64](t, ctx, `document.getElementById('usage-bytes').max`))

	// A queue: Slow runs one request at a time, and holds it; three more wait.
	for i := range 4 {
		status, body := post(t, s, s.Key, "/api/v1/admin/tenants/default/messaging/send", map[string]any{
			"agentName": "Slow", "activationName": fmt.Sprintf("job-%d", i), "participantId": "ops", "type": "Data", "text": "work", "data": map[string]any{}})
		require.Equal(t, http.StatusAccepted, status, "%s", body)
	}
	figure := func(name string) string {
		return evaluate[string](t, ctx, fmt.Sprintf(`document.querySelector('#queue-charts article[data-agent="Slow"] [data-figure=%q] dd').textContent`, name))
	}
	require.NoError(t, chromedp.Do(ctx,
		waitFor(`(() => { const c = document.querySelector('#queue-charts article[data-agent="Slow"]');
			return c !== null && c.querySelector('[data-figure="queued"] dd').textContent === '3' &&
				c.querySelector('[data-figure="running"] dd').textContent === '1'; })()`),
	), "Slow's queue; the page's problems: %v", problems())
	assert.Equal(t, "50", figure("maxQueued"))
	assert.Equal(t, "4", figure("maxConcurrent"))
	assert.Equal(t, "no", figure("crowding"))
	assert.Regexp(t, `s$`, figure("oldestWait"))
	assert.Contains(t, evaluate[string](t, ctx, `document.getElementById('queues-quiet').textContent`), "Nothing queued or running: Echo.")
	// The chart: the queued line's newest point stands above the baseline at the right.
	assert.True(t, evaluate[bool](t, ctx, `(() => { const svg = document.querySelector('#queue-charts article[data-agent="Slow"] figure[data-chart="queue"] svg');
		const base = Number(svg.querySelector('line.grid').getAttribute('y1'));
		const p = svg.querySelector('path[data-series="queued"]');
		const dot = svg.querySelector('circle.s-queued');
		return Number(p.dataset.points) >= 1 && dot !== null && Number(dot.getAttribute('cy')) < base; })()`))
	assert.Contains(t, evaluate[string](t, ctx, `document.querySelector('#queue-charts article[data-agent="Slow"] figure[data-chart="queue"] svg title').textContent`),
		"queued: latest 3")
	assert.GreaterOrEqual(t, evaluate[int](t, ctx, `Number(document.querySelector('#queue-charts figure[data-chart="wait"] path[data-series="wait"]').dataset.points)`), 1)
	screenshot(t, ctx, "console-limits-queue.png")

	// Let them run: the queue empties, and the chart keeps what it held.
	release()
	require.NoError(t, chromedp.Do(ctx,
		waitFor(`(() => { const c = document.querySelector('#queue-charts article[data-agent="Slow"]');
			return c !== null && c.querySelector('[data-figure="queued"] dd').textContent === '0' &&
				c.querySelector('[data-figure="running"] dd').textContent === '0'; })()`),
		// A slot shows the most its samples held: the chart's newest point falls to 0 with the
		// next slot.
		waitFor(`document.querySelector('#queue-charts article[data-agent="Slow"] figure[data-chart="queue"] svg title').textContent.includes('queued: latest 0, highest 3')`),
	), "Slow's queue run; the page's problems: %v", problems())

	// ---- a tenant admin of default -------------------------------------------------------

	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.ID("forget")),
		waitFor(`document.getElementById('limits-error').textContent.startsWith('No key yet')`),
		chromedp.SendKeys(chromedp.ID("key"), s.Key),
		chromedp.Click(chromedp.ID("use-key")),
		waitFor(`document.getElementById('who').textContent === 'Tenant admin of default.'`),
		waitFor(`document.querySelector('#limits-table tr[data-limit="maxQueued"]') !== null`),
	), "the limits page as a tenant admin; the page's problems: %v", problems())
	assert.Equal(t, "50", holds("maxQueued"))
	assert.True(t, evaluate[bool](t, ctx, `document.getElementById('limits-edit').hidden`), "the form is for system admins")
	screenshot(t, ctx, "console-limits-tenant.png")

	var unexpected []string
	for _, p := range problems() {
		// The browser logs the 400 of the refused weight, which the page showed.
		if strings.Contains(p, "status of 400") && strings.Contains(p, "/tenants/default/limits") {
			continue
		}
		unexpected = append(unexpected, p)
	}
	assert.Empty(t, unexpected)
}
