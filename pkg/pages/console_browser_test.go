package pages_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
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

// evaluate runs a JavaScript expression in the page and returns its value.
func evaluate[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	require.NoError(t, err, "evaluating %s", js)
	return v
}

// loads is how many times a console page has shown its data.
func loads(t *testing.T, ctx context.Context, page string) int {
	t.Helper()
	return evaluate[int](t, ctx, fmt.Sprintf(`Number(document.getElementById('page-%s').dataset.loaded || 0)`, page))
}

// loadedAfter is a condition: the page has shown its data more than n times.
func loadedAfter(page string, n int) string {
	return fmt.Sprintf(`Number(document.getElementById('page-%s').dataset.loaded || 0) > %d`, page, n)
}

// open goes to a console page by its address's fragment and waits until the page has shown
// fresh data.
func open(t *testing.T, ctx context.Context, page, fragment string) chromedp.Action[chromedp.Void] {
	t.Helper()
	n := loads(t, ctx, page)
	return chromedp.Steps(
		chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`location.hash = %q`, fragment)),
		waitFor(loadedAfter(page, n)),
	)
}

// post sends a request to the stack with key in the Authorization header, or in the apikey query
// parameter for the webhook routes, and returns the status and body.
func post(t *testing.T, s *stacktest.Stack, key, path string, body any) (int, []byte) {
	t.Helper()
	var b []byte
	if body != nil {
		var err error
		b, err = json.Marshal(body)
		require.NoError(t, err)
	}
	req, err := http.NewRequest(http.MethodPost, s.URL+path, bytes.NewReader(b))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, out
}

// webhook calls an agent's webhook method on an instance of the tenant, with a key of it.
func webhook(t *testing.T, s *stacktest.Stack, key, tenant, agentName, activation, method string, query url.Values) int {
	t.Helper()
	if query == nil {
		query = url.Values{}
	}
	query.Set("apikey", key)
	wf := url.PathEscape(tenant + ":" + agentName + ":Supervisor Workflow:" + activation)
	status, _ := post(t, s, key, "/api/user/webhooks/"+wf+"/"+method+"?"+query.Encode(), nil)
	return status
}

// TestConsoleInBrowser drives the operator console in a headless Chromium against a whole stack
// with traffic on it: Echo's calls (some failing, some slow) in tenant default, a Billing request
// held in retry backoff with another queued behind it, and calls of tenant other to Ledger, an
// agent only tenant other may use. With a tenant-admin key of default it checks every page (the
// hosts map, the charts with data, the instance list and page with state and queue, retry now,
// a request that waits (Echo's ask), the dead letter and its replay) and that nothing of Ledger shows; then, with a system-admin
// key, the system views and switching to tenant other. Screenshots go under the test's temp dir,
// and into AGENTBUS_SCREENSHOT_DIR when it is set.
func TestConsoleInBrowser(t *testing.T) {
	ctx, problems := browsertest.Start(t, 3*time.Minute)
	const adminKey = "sys_console_test_key_0123456789abcdef"

	// Billing's charge fails with a retryable error until the gateway is up; ping always works.
	var gatewayUp atomic.Bool
	var charged atomic.Int32
	billing := agent.New("Billing", agent.Tenants("default"))
	agent.Method(billing, "charge", func(context.Context, struct{}) (map[string]bool, error) {
		if !gatewayUp.Load() {
			return nil, agent.Retryable(errors.New("payment gateway unavailable"))
		}
		charged.Add(1)
		return map[string]bool{"charged": true}, nil
	})
	agent.Method(billing, "ping", func(context.Context, struct{}) (map[string]bool, error) {
		return map[string]bool{"pong": true}, nil
	})
	ledger := agent.New("Ledger", agent.Tenants("other"))
	ledger.WebhookFunc("post", func(context.Context, *agent.WebhookRequest) agent.Response {
		return agent.JSON(http.StatusOK, map[string]bool{"posted": true})
	})
	s := stacktest.Start(t, stacktest.Options{
		Agents:   []*agent.Agent{echo.New(), billing, ledger},
		AdminKey: adminKey,
		// A failed charge waits a minute for its second and last attempt, unless retried now.
		Host: agent.HostConfig{RetryBackoff: time.Minute, MaxDeliveries: 2},
	})

	// Traffic: 12 good calls over three Echo instances and one to each of 9 more, 2 answered
	// 500, 1 answered 404, 2 slow.
	for i := range 12 {
		require.Equal(t, http.StatusOK, webhook(t, s, s.Key, "default", "Echo", []string{"alice", "bob", "carol"}[i%3], "count", nil))
	}
	for i := range 9 {
		require.Equal(t, http.StatusOK, webhook(t, s, s.Key, "default", "Echo", fmt.Sprintf("batch-%d", i), "count", nil))
	}
	for range 2 {
		require.Equal(t, http.StatusInternalServerError, webhook(t, s, s.Key, "default", "Echo", "alice", "status", url.Values{"code": {"500"}}))
	}
	require.Equal(t, http.StatusNotFound, webhook(t, s, s.Key, "default", "Echo", "alice", "status", url.Values{"code": {"404"}}))
	for range 2 {
		require.Equal(t, http.StatusOK, webhook(t, s, s.Key, "default", "Echo", "bob", "sleep", url.Values{"ms": {"150"}}))
	}
	const echoRequests = 26
	for range 3 {
		require.Equal(t, http.StatusOK, webhook(t, s, s.OtherKey, "other", "Ledger", "books", "post", nil))
	}
	// A charge that fails and waits in backoff, and a ping queued behind it.
	for _, method := range []string{"charge", "ping"} {
		status, body := post(t, s, s.Key, "/api/v1/admin/tenants/default/messaging/send", map[string]any{
			"agentName": "Billing", "activationName": "acct-7", "participantId": "ops", "type": "Data", "text": method, "data": map[string]any{}})
		require.Equal(t, http.StatusAccepted, status, "%s", body)
	}
	const billingWF = "default:Billing:Supervisor Workflow:acct-7"

	// ---- a tenant admin of default --------------------------------------------------------

	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(s.URL+"/console"),
		chromedp.WaitVisible(chromedp.ID("key")),
		waitFor(`document.getElementById('hosts-error').textContent.startsWith('No key yet')`),
		chromedp.SendKeys(chromedp.ID("key"), s.Key),
		chromedp.Click(chromedp.ID("use-key")),
		waitFor(`document.getElementById('who').textContent === 'Tenant admin of default.'`),
		waitFor(loadedAfter("hosts", 0)),
	), "opening the console with a tenant-admin key; the page's problems: %v", problems())

	// Hosts: the one host, and the partitions of the agents default may use, not Ledger's.
	err := chromedp.Do(ctx,
		waitFor(`document.querySelectorAll('#host-list li.card[data-host]').length === 1`),
		waitFor(`document.querySelectorAll('.pmap[data-agent="Echo"] .pcell').length === 4`),
		waitFor(`document.querySelectorAll('.pmap[data-agent="Billing"] .pcell').length === 4`),
		// The map is live: it is read again every few seconds.
		waitFor(loadedAfter("hosts", 1)),
	)
	require.NoError(t, err, "the hosts page; the page's problems: %v", problems())
	assert.Equal(t, 0, evaluate[int](t, ctx, `document.querySelectorAll('.pmap[data-agent="Ledger"]').length`), "Ledger is tenant other's")
	assert.Equal(t, 0, evaluate[int](t, ctx, `document.querySelectorAll('.pcell.none').length`), "every partition has a holder")
	assert.Contains(t, evaluate[string](t, ctx, `document.getElementById('hosts-live').textContent`), "updated")
	screenshot(t, ctx, "console-hosts-tenant.png")

	// Agents: Echo's figures and charts with data; Billing's calls; nothing of Ledger.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.ID("nav-agents")),
		waitFor(loadedAfter("agents", 0)),
		waitFor(`document.querySelector('article[data-agent="Echo"]') !== null`),
	), "the agents page; the page's problems: %v", problems())
	figure := func(agentName, name string) string {
		return evaluate[string](t, ctx, fmt.Sprintf(`document.querySelector('article[data-agent=%q] [data-figure=%q] dd').textContent`, agentName, name))
	}
	assert.Equal(t, strconv.Itoa(echoRequests), figure("Echo", "requests"))
	assert.Regexp(t, `^2 \(`, figure("Echo", "errors"), "the two 500s")
	assert.Equal(t, "1", figure("Echo", "clientErrors"), "the 404")
	assert.Regexp(t, `ms$`, figure("Echo", "p99"))
	assert.Equal(t, "2", figure("Billing", "requests"), "the two sends")
	points := func(agentName, series string) int {
		return evaluate[int](t, ctx, fmt.Sprintf(`Number(document.querySelector('article[data-agent=%q] path[data-series=%q]').dataset.points)`, agentName, series))
	}
	assert.Equal(t, 30, points("Echo", "rate"), "a rate point per 30-second slot of 15 minutes")
	for _, series := range []string{"errors", "p50", "p99"} {
		assert.GreaterOrEqual(t, points("Echo", series), 1, "%s has a point where calls were", series)
	}
	// The rate line rises above the chart's baseline where the calls were (the newest slot may
	// have just begun, without calls).
	assert.True(t, evaluate[bool](t, ctx, `(() => { const svg = document.querySelector('article[data-agent="Echo"] figure[data-chart="rate"] svg');
		const base = Number(svg.querySelector('line.grid').getAttribute('y1'));
		const ys = [...svg.querySelector('path').getAttribute('d').matchAll(/[ML][\d.]+ ([\d.]+)/g)].map(m => Number(m[1]));
		return ys.length === 30 && Math.min(...ys) < base && svg.querySelector('circle') !== null; })()`))
	assert.Contains(t, evaluate[string](t, ctx, `document.querySelector('article[data-agent="Echo"] figure[data-chart="latency"] svg title').textContent`), "p99: latest")
	assert.Equal(t, 0, evaluate[int](t, ctx, `document.querySelectorAll('article[data-agent="Ledger"]').length`))
	assert.NotContains(t, evaluate[string](t, ctx, `document.getElementById('page-agents').textContent`), "Ledger")
	assert.True(t, evaluate[bool](t, ctx, `document.getElementById('tenant-ranking').hidden`), "the tenant ranking is for system admins")
	// A refresh keeps the keyboard focus on the link it was on.
	n := loads(t, ctx, "agents")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Evaluate[chromedp.Void](`document.querySelector('article[data-agent="Echo"] h3 a').focus()`),
		waitFor(loadedAfter("agents", n)),
	), "refreshing the agents page; the page's problems: %v", problems())
	assert.Equal(t, "#/instances?agent=Echo", evaluate[string](t, ctx, `document.activeElement.getAttribute('href')`))
	screenshot(t, ctx, "console-agents-tenant.png")

	// Instances: Echo's twelve, from the card's link, ten a page; a filter; Billing's one.
	rows := `document.querySelectorAll('#instances-table tbody tr[data-workflow-id]').length`
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`article[data-agent="Echo"] h3 a`)),
		waitFor(loadedAfter("instances", 0)),
		waitFor(rows+` === 12`),
	), "the instances page; the page's problems: %v", problems())
	assert.Equal(t, []string{"Billing", "Echo"}, evaluate[[]string](t, ctx, `[...document.querySelectorAll('#inst-agent option')].map(o => o.value)`))
	n = loads(t, ctx, "instances")
	require.NoError(t, chromedp.Do(ctx,
		choose("#inst-limit", "10"),
		chromedp.Click(chromedp.ID("inst-search")),
		waitFor(loadedAfter("instances", n)),
		waitFor(rows+` === 10`),
		chromedp.Click(chromedp.ID("inst-older")),
		waitFor(rows+` === 2`),
		waitFor(`document.getElementById('inst-older').disabled`),
		chromedp.Click(chromedp.ID("inst-newer")),
		waitFor(rows+` === 10`),
	), "paging through the instances; the page's problems: %v", problems())
	n = loads(t, ctx, "instances")
	require.NoError(t, chromedp.Do(ctx,
		replace("#inst-prefix", "bo"),
		chromedp.Click(chromedp.ID("inst-search")),
		waitFor(loadedAfter("instances", n)),
	))
	assert.Equal(t, []string{"default:Echo:Supervisor Workflow:bob"},
		evaluate[[]string](t, ctx, `[...document.querySelectorAll('#instances-table tbody tr')].map(r => r.dataset.workflowId)`))
	screenshot(t, ctx, "console-instances.png")
	n = loads(t, ctx, "instances")
	require.NoError(t, chromedp.Do(ctx,
		replace("#inst-prefix", ""),
		choose("#inst-agent", "Billing"),
		waitFor(loadedAfter("instances", n)),
		waitFor(`document.querySelectorAll('#instances-table tbody tr[data-workflow-id]').length === 1`),
	), "Billing's instances; the page's problems: %v", problems())

	// The instance page: state and summary, and the queue: the charge in backoff, the ping behind it.
	n = loads(t, ctx, "instance")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`#instances-table tbody tr a`)),
		waitFor(loadedAfter("instance", n)),
		waitFor(`document.querySelector('#inst-queue tr[data-reason="retry-backoff"]') !== null`),
		waitFor(`document.querySelector('#inst-queue tr[data-reason="behind-earlier-request"]') !== null`),
	), "the instance page's queue; the page's problems: %v", problems())
	assert.Equal(t, billingWF, evaluate[string](t, ctx, `document.getElementById('inst-id').textContent`))
	assert.Equal(t, "running", evaluate[string](t, ctx, `document.querySelector('[data-field="status"]').textContent`))
	assert.NotEmpty(t, evaluate[string](t, ctx, `document.querySelector('[data-field="host"]').textContent`))
	screenshot(t, ctx, "console-instance-queue.png")

	// Retry now: the second and last attempt fails too, and the charge becomes a dead letter;
	// the ping then runs, and nothing waits.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`#inst-queue tr[data-reason="retry-backoff"] button`)),
		waitFor(`document.getElementById('inst-action').textContent.includes('runs again now')`),
		waitFor(`document.getElementById('inst-queue').textContent.includes('Nothing queued')`),
		waitFor(`document.querySelectorAll('#inst-dead tr[data-id]').length === 1`),
	), "retrying the held request; the page's problems: %v", problems())

	// An Echo instance's page shows its state.
	require.NoError(t, chromedp.Do(ctx,
		open(t, ctx, "instance", "#/instance?id="+url.QueryEscape("default:Echo:Supervisor Workflow:carol")),
		waitFor(`document.getElementById('inst-state').textContent.includes('"count": 4')`),
		waitFor(`document.getElementById('inst-queue').textContent.includes('Nothing queued')`),
		waitFor(`document.querySelectorAll('#inst-recent tr[data-request-id]').length >= 4`),
	), "Echo's instance page; the page's problems: %v", problems())
	assert.Contains(t, evaluate[string](t, ctx, `document.getElementById('inst-waits').textContent`), "no request of the instance waits")
	screenshot(t, ctx, "console-instance.png")
	// Complete its run: the button asks for a second press.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.ID("inst-complete")),
		waitFor(`document.getElementById('inst-complete').textContent.startsWith('Confirm')`),
		chromedp.Click(chromedp.ID("inst-complete")),
		waitFor(`document.getElementById('inst-action').textContent.includes('completed')`),
		waitFor(`document.querySelector('[data-field="status"]').textContent === 'completed'`),
	), "completing a run; the page's problems: %v", problems())

	// A request that waits: Echo's ask, in alice's instance, waits for dana's Chat message or
	// answer call; the instance page lists it among the waiting requests.
	status, body := post(t, s, s.Key, "/api/v1/admin/tenants/default/messaging/send?wait=true", map[string]any{
		"agentName": "Echo", "activationName": "alice", "participantId": "dana", "type": "Data", "text": "ask", "data": map[string]any{"question": "Which colour?"}})
	require.Equal(t, http.StatusAccepted, status, "%s", body)
	var asked struct {
		RequestID string `json:"requestId"`
	}
	require.NoError(t, json.Unmarshal(body, &asked))
	require.NoError(t, chromedp.Do(ctx,
		open(t, ctx, "instance", "#/instance?id="+url.QueryEscape("default:Echo:Supervisor Workflow:alice")),
		waitFor(`document.querySelector('#inst-waits tr[data-participant="dana"]') !== null`),
	), "an instance with a waiting request; the page's problems: %v", problems())
	cells := evaluate[[]string](t, ctx, `[...document.querySelectorAll('#inst-waits tr[data-participant="dana"] td')].map(td => td.textContent)`)
	require.Len(t, cells, 7, "%q", cells)
	assert.Equal(t, "dana", cells[0])
	assert.Equal(t, "Data ask (wait answer)", cells[1])
	assert.Equal(t, "Chat message / Data answer / signal answer", cells[2])
	assert.Regexp(t, `^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC$`, cells[3], "the deadline")
	assert.Regexp(t, `^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC$`, cells[4], "since")
	assert.Equal(t, asked.RequestID, cells[5])
	assert.Equal(t, "0", cells[6], "requests queued behind the wait")
	assert.Equal(t, 1, evaluate[int](t, ctx, `document.querySelectorAll('#inst-waits tr[data-request-id]').length`))
	screenshot(t, ctx, "console-instance-waits.png")

	// Another tenant's instance is not found, and the page says so as text.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Evaluate[chromedp.Void](`location.hash = '#/instance?id=' + encodeURIComponent('other:Ledger:Supervisor Workflow:books')`),
		waitFor(`document.getElementById('instance-error').textContent.includes('404')`),
	), "another tenant's instance; the page's problems: %v", problems())
	assert.True(t, evaluate[bool](t, ctx, `document.getElementById('instance-body').hidden`))

	// Dead letters: the charge, replayed once the gateway is up.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.ID("nav-deadletters")),
		waitFor(loadedAfter("deadletters", 0)),
		waitFor(`document.querySelectorAll('#dl-table tbody tr[data-id]').length === 1`),
	), "the dead letters page; the page's problems: %v", problems())
	assert.Contains(t, evaluate[string](t, ctx, `document.querySelector('#dl-table tbody tr').textContent`), "payment gateway unavailable")
	assert.Equal(t, "Billing", evaluate[string](t, ctx, `document.querySelector('#dl-table tbody tr').dataset.agent`))
	screenshot(t, ctx, "console-deadletters.png")
	gatewayUp.Store(true)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`#dl-table tbody tr button`)), // Replay
		waitFor(`document.getElementById('dl-action').textContent.includes('replayed')`),
		waitFor(`document.getElementById('dl-empty').textContent === 'No dead letters in tenant default.'`),
	), "replaying the dead letter; the page's problems: %v", problems())
	require.Eventually(t, func() bool { return charged.Load() == 1 }, 10*time.Second, 20*time.Millisecond, "the replayed charge runs")

	// ---- a system admin ---------------------------------------------------------------------

	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.ID("forget")),
		waitFor(`document.getElementById('hosts-error').textContent.startsWith('No key yet') && document.getElementById('tenant').options.length === 0`),
		chromedp.Click(chromedp.ID("nav-hosts")),
		chromedp.SendKeys(chromedp.ID("key"), adminKey),
		chromedp.Click(chromedp.ID("use-key")),
		waitFor(`document.getElementById('who').textContent.startsWith('System admin')`),
		waitFor(`document.querySelectorAll('.pmap[data-agent]').length === 3`),
	), "the system admin's hosts page; the page's problems: %v", problems())
	assert.Equal(t, []string{"Billing", "Echo", "Ledger"}, evaluate[[]string](t, ctx, `[...document.querySelectorAll('.pmap[data-agent]')].map(e => e.dataset.agent)`))
	assert.Equal(t, []string{"default", "other"}, evaluate[[]string](t, ctx, `[...document.getElementById('tenant').options].map(o => o.value)`))
	screenshot(t, ctx, "console-hosts-system.png")

	require.NoError(t, chromedp.Do(ctx,
		open(t, ctx, "agents", "#/agents"),
		waitFor(`document.querySelector('article[data-agent="Echo"]') !== null`),
		waitFor(`document.querySelectorAll('#tenant-table tbody tr[data-tenant]').length === 2`),
	), "the system admin's agents page; the page's problems: %v", problems())
	assert.False(t, evaluate[bool](t, ctx, `document.getElementById('tenant-ranking').hidden`))
	assert.Equal(t, []string{"default", "other"}, evaluate[[]string](t, ctx, `[...document.querySelectorAll('#tenant-table tbody tr[data-tenant]')].map(r => r.dataset.tenant)`), "busiest first")
	screenshot(t, ctx, "console-agents-system.png")

	// Switching to tenant other shows Ledger's calls, and its instance.
	n = loads(t, ctx, "agents")
	require.NoError(t, chromedp.Do(ctx,
		choose("#tenant", "other"),
		waitFor(loadedAfter("agents", n)),
		waitFor(`document.querySelector('article[data-agent="Ledger"]') !== null`),
	), "tenant other's agents; the page's problems: %v", problems())
	assert.Equal(t, "3", figure("Ledger", "requests"))
	assert.Equal(t, 0, evaluate[int](t, ctx, `document.querySelectorAll('article[data-agent="Echo"]').length`), "tenant other did not call Echo")
	require.NoError(t, chromedp.Do(ctx,
		open(t, ctx, "instances", "#/instances?agent=Ledger"),
		waitFor(`document.querySelectorAll('#instances-table tbody tr[data-workflow-id]').length === 1`),
	), "tenant other's instances; the page's problems: %v", problems())
	assert.Equal(t, "other:Ledger:Supervisor Workflow:books", evaluate[string](t, ctx, `document.querySelector('#instances-table tbody tr').dataset.workflowId`))
	screenshot(t, ctx, "console-instances-system.png")

	// The key never went into the page's address, and nothing broke: no exception, no error
	// logged, no Content-Security-Policy violation.
	location, err := chromedp.Run(ctx, chromedp.Location())
	require.NoError(t, err)
	assert.NotContains(t, location, s.Key)
	assert.NotContains(t, location, adminKey)
	var unexpected []string
	for _, p := range problems() {
		// The browser logs the 404 of the other tenant's instance, which the page showed.
		if strings.Contains(p, "status of 404") && strings.Contains(p, "/instances/other%3ALedger") {
			continue
		}
		unexpected = append(unexpected, p)
	}
	assert.Empty(t, unexpected)
}
