package pages_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/stacktest"
)

// threadHas is a condition: a message of that direction ("in" to the agent, "out" from it) in
// the thread whose text or data contains want.
func threadHas(direction, want string) string {
	return fmt.Sprintf(`[...document.querySelectorAll('#thread li[data-direction=%q]')].some(li => li.textContent.includes(%q))`, direction, want)
}

// TestPlaygroundInBrowser drives the playground page in a headless Chromium against a whole
// stack: paste the key, pick Echo, send a chat message and see Echo's reply in the answer and in
// the live thread; then a Data call and a webhook; then a reminder set from outside the page,
// whose post arrives later and must appear live, every message once. Screenshots after the chat and at the end
// are written under the test's temp dir (and into AGENTBUS_SCREENSHOT_DIR when set).
func TestPlaygroundInBrowser(t *testing.T) {
	ctx, problems := browser(t, 2*time.Minute)
	s := stacktest.Start(t, stacktest.Options{})

	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(s.URL+"/"), // redirected to /ui
		chromedp.WaitVisible(chromedp.ID("key")),
	), "opening the page")
	location, err := chromedp.Run(ctx, chromedp.Location())
	require.NoError(t, err)
	assert.Equal(t, s.URL+"/ui", location)

	const msg = "hello from the browser"
	err = chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.ID("key"), s.Key),
		chromedp.Click(chromedp.ID("load-agents")),
		waitFor(`document.querySelector('#agent option[value="Echo"]') !== null`),
		choose("#agent", "Echo"),
		choose("#workflow-type", "Supervisor Workflow"),
		// The thread is followed before anything is sent, so the reply must arrive live.
		waitFor(`document.getElementById('thread-state').dataset.state === 'live'`),
		replace("#chat-text", msg),
		chromedp.Click(chromedp.ID("send")),
		waitFor(threadHas("out", "You said: "+msg)),
		waitFor(threadHas("in", msg)),
		waitFor(`document.getElementById('answer').textContent === 'You said: `+msg+`'`),
	)
	require.NoError(t, err, "chatting with Echo; the page's problems: %v", problems())
	assert.Equal(t, "default:Echo:Supervisor Workflow:default", text(t, ctx, "workflow-id"))
	assert.Equal(t, "You said: "+msg, text(t, ctx, "answer"))
	screenshot(t, ctx, "playground-chat.png")

	// A chat whose model calls one of Echo's Data methods as a tool: the thread marks the call
	// and its result, and the streamed answer lists them above the text, also once the final
	// message has replaced the streamed text.
	err = chromedp.Do(ctx,
		replace("#chat-text", `call sum {"values":[2,3]}`),
		chromedp.Click(chromedp.ID("send")),
		waitFor(`[...document.querySelectorAll('#thread li.tool[data-direction="in"]')].some(li => li.textContent.includes('sum'))`),
		waitFor(`[...document.querySelectorAll('#thread li.tool[data-direction="out"]')].some(li => li.textContent.includes('"sum": 5'))`),
		waitFor(`document.getElementById('answer-meta').textContent.startsWith('200 streamed') && document.getElementById('answer').textContent.includes('sum returned')`),
	)
	require.NoError(t, err, "a chat with a tool call; the page's problems: %v", problems())
	assert.Equal(t, "[tool call sum {\"values\":[2,3]}]\n[tool result sum: {\"sum\":5}]\nsum returned {\"sum\":5}", text(t, ctx, "answer"),
		"the tool lines stay above the final answer")
	screenshot(t, ctx, "playground-tools.png")

	// A Data call shows its result in the thread as JSON; a webhook call shows the handler's answer.
	err = chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`input[name=kind][value=Data]`)),
		choose("#data-method", "sum"),
		replace("#data-params", `{"values":[4,5,6]}`),
		chromedp.Click(chromedp.ID("send")),
		waitFor(threadHas("out", `"sum": 15`)),
		chromedp.Click(chromedp.CSS(`input[name=kind][value=Webhook]`)),
		choose("#webhook-method", "echo"),
		replace("#webhook-query", "order=17"),
		replace("#webhook-body", `{"item":"tea"}`),
		chromedp.Click(chromedp.ID("send")),
		waitFor(`document.getElementById('answer-meta').textContent.startsWith('200 ')`),
		waitFor(threadHas("in", "echo")),
	)
	require.NoError(t, err, "Data and webhook calls; the page's problems: %v", problems())
	answer := text(t, ctx, "answer")
	assert.Contains(t, answer, `"order": "17"`)
	assert.NotContains(t, answer, s.Key, "the handler's parameters hold no key")

	// An Agent2User post that comes later and answers nothing the page sent: a reminder set from
	// outside the page, which Echo posts to the thread the page watches when it is due. The page
	// shows it live, as a Chat message from the agent.
	const reminder = "a reminder set from outside the page"
	status, body := sendData(t, s, "default", "user", "remind", map[string]any{"text": reminder, "ms": 1500})
	require.Equal(t, http.StatusOK, status, "%s", body)
	err = chromedp.Do(ctx, waitFor(
		`[...document.querySelectorAll('#thread li[data-direction="out"][data-type="Chat"]')].some(li => li.textContent.includes(`+strconv.Quote(reminder)+`))`))
	require.NoError(t, err, "a post arriving later; the page's problems: %v", problems())
	assert.Equal(t, "live", text(t, ctx, "thread-state"))

	// Every message is shown once, however it reached the page (history page or stream).
	ids, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('#thread li')].map(li => li.dataset.id)`))
	require.NoError(t, err)
	assert.NotEmpty(t, ids)
	seen := map[string]bool{}
	for _, id := range ids {
		assert.False(t, seen[id], "message %s is shown twice", id)
		seen[id] = true
	}

	screenshot(t, ctx, "playground.png")

	// The key never went into the page's address, and nothing broke: no exception, no error
	// logged, no Content-Security-Policy violation.
	location, err = chromedp.Run(ctx, chromedp.Location())
	require.NoError(t, err)
	assert.NotContains(t, location, s.Key)
	assert.Empty(t, problems())
}

// A message stored while the page connects to a thread is shown: the page's listen request is
// held back (through the DevTools protocol) until a message, and Echo's reply to it, are stored
// in the thread the page opens, which was empty. The stream, once it listens, only delivers what
// comes next; the page reads the thread then, and shows both, once each.
func TestPlaygroundShowsMessagesStoredWhileConnecting(t *testing.T) {
	ctx, problems := browser(t, time.Minute)
	s := stacktest.Start(t, stacktest.Options{})

	err := chromedp.Do(ctx,
		chromedp.Navigate(s.URL+"/ui"),
		chromedp.WaitVisible(chromedp.ID("key")),
		chromedp.SendKeys(chromedp.ID("key"), s.Key),
		chromedp.Click(chromedp.ID("load-agents")),
		waitFor(`document.querySelector('#agent option[value="Echo"]') !== null`),
		choose("#agent", "Echo"),
		choose("#workflow-type", "Supervisor Workflow"),
		waitFor(`document.getElementById('thread-state').dataset.state === 'live'`),
	)
	require.NoError(t, err, "opening the page; the page's problems: %v", problems())

	// From here on the page's listen requests wait for the test.
	paused := make(chan fetch.RequestID, 8)
	require.NoError(t, chromedp.Listen(ctx, func(ev any) {
		if ev, ok := ev.(*fetch.EventRequestPaused); ok {
			paused <- ev.RequestID
		}
	}))
	_, err = chromedp.Call(ctx, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{{URLPattern: "*/messaging/listen?*"}}})
	require.NoError(t, err, "holding back the listen requests")

	const activation = "connecting"
	// Changing the activation makes the page watch that thread (once: a click on Watch as well
	// would start it twice).
	require.NoError(t, chromedp.Do(ctx, replace("#activation", activation),
		chromedp.Evaluate[chromedp.Void](`document.getElementById('activation').dispatchEvent(new Event('change', {bubbles: true}))`)),
		"watching another thread")
	var listen fetch.RequestID
	select {
	case listen = <-paused:
	case <-ctx.Done():
		require.FailNow(t, "the page did not open the listen stream", "the page's problems: %v", problems())
	}

	status, body := sendData(t, s, activation, "user", "echo", map[string]any{"word": "stored while connecting"})
	require.Equal(t, http.StatusOK, status, "%s", body)
	require.Eventually(t, func() bool { return len(threadIDs(t, s, activation, "user")) == 2 }, 10*time.Second, 20*time.Millisecond,
		"the message and its reply are stored")

	_, err = chromedp.Call(ctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: listen})
	require.NoError(t, err, "letting the listen request go")
	_, err = chromedp.Call(ctx, fetch.Disable, cdp.Empty{})
	require.NoError(t, err)
	err = chromedp.Do(ctx,
		waitFor(`document.getElementById('thread-state').dataset.state === 'live'`),
		waitFor(threadHas("in", "stored while connecting")),
		waitFor(threadHas("out", "stored while connecting")),
	)
	require.NoError(t, err, "the messages stored while the page connected; the page's problems: %v", problems())
	ids, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('#thread li')].map(li => li.dataset.id)`))
	require.NoError(t, err)
	stored := threadIDs(t, s, activation, "user")
	slices.Reverse(stored)
	assert.Equal(t, stored, ids, "the page shows the thread's messages, oldest first, once each")
	assert.Empty(t, problems())
}

// A streamed chat whose handler runs again: the page drops what the failed attempt streamed when
// the restart event comes, and shows only the new attempt's text (here while that attempt still
// runs, before the final message replaces the streamed text anyway).
func TestPlaygroundStreamRestarts(t *testing.T) {
	ctx, problems := browser(t, time.Minute)
	release := make(chan struct{})
	var releaseOnce sync.Once
	flaky := agent.New("Flaky")
	flaky.ChatFunc(func(ctx context.Context, m *agent.Message) (agent.Reply, error) {
		if m.Attempt == 1 {
			m.Delta("a first try ")
			return agent.NoReply, agent.Retryable(errors.New("the model went away"))
		}
		m.Delta("You said: ")
		m.Delta(m.Text)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return agent.Say("You said: " + m.Text), nil
	})
	s := stacktest.Start(t, stacktest.Options{Agents: []*agent.Agent{flaky}})
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })

	err := chromedp.Do(ctx,
		chromedp.Navigate(s.URL+"/ui"),
		chromedp.WaitVisible(chromedp.ID("key")),
		chromedp.SendKeys(chromedp.ID("key"), s.Key),
		chromedp.Click(chromedp.ID("load-agents")),
		waitFor(`document.querySelector('#agent option[value="Flaky"]') !== null`),
		choose("#agent", "Flaky"),
		choose("#workflow-type", "Supervisor Workflow"),
		replace("#chat-text", "hello"),
		chromedp.Click(chromedp.ID("send")),
		waitFor(`document.getElementById('answer').textContent === 'You said: hello'`),
		waitFor(`document.getElementById('answer-meta').textContent.startsWith('streaming, attempt 2')`),
	)
	require.NoError(t, err, "a streamed chat that runs again; the page's problems: %v", problems())
	releaseOnce.Do(func() { close(release) })
	err = chromedp.Do(ctx, waitFor(`document.getElementById('answer-meta').textContent.startsWith('200 streamed')`))
	require.NoError(t, err, "the final message; the page's problems: %v", problems())
	assert.Equal(t, "You said: hello", text(t, ctx, "answer"))
	assert.Empty(t, problems())
}
