package playground_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/stacktest"
)

// browserNames are the Chromium builds the browser test looks for in PATH, in this order.
// AGENTBUS_CHROMIUM names one elsewhere. .ci/run's find_browser looks for the same.
var browserNames = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}

// findBrowser returns the path of a Chromium binary, or skips the test saying why.
func findBrowser(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("AGENTBUS_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range browserNames {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skipf("chromium not found: none of %s is in PATH (set AGENTBUS_CHROMIUM to a Chromium binary; "+
		".ci/run installs Debian's chromium when apt-get is available), so the playground was not tested in a browser",
		strings.Join(browserNames, ", "))
	return ""
}

// browser starts a headless Chromium for the test and returns its context, bounded by timeout.
// The browser is closed and its process waited for when the test ends. Everything the page logs
// as an error, and every uncaught exception, is collected in problems.
func browser(t *testing.T, timeout time.Duration) (ctx context.Context, problems func() []string) {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(findBrowser(t)),
		chromedp.Headless,
		chromedp.NoSandbox, // CI runs as root, where Chromium's sandbox cannot start
		chromedp.DisableGPU,
		chromedp.WindowSize(1400, 900),
		chromedp.UserDataDir(t.TempDir()),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	browserCtx, cancelBrowser := chromedp.NewContext(allocCtx)
	// The first action binds the browser's life to its context: this one, so that nothing of the
	// browser outlives the test's time limit.
	ctx, cancelTimeout := context.WithTimeout(browserCtx, timeout)
	t.Cleanup(func() {
		// Cancel closes the browser and waits for its process; the allocator's cancel then
		// removes what is left.
		if err := chromedp.Cancel(ctx); err != nil {
			t.Logf("closing the browser: %v", err)
		}
		cancelTimeout()
		cancelBrowser()
		cancelAlloc()
	})

	var (
		mu   sync.Mutex
		seen []string
	)
	err := chromedp.Listen(ctx, func(ev any) {
		var msg string
		switch ev := ev.(type) {
		case *runtime.EventExceptionThrown:
			msg = "exception: " + ev.ExceptionDetails.Text
			if ev.ExceptionDetails.Exception != nil {
				msg += " " + ev.ExceptionDetails.Exception.Description
			}
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError {
				var parts []string
				for _, a := range ev.Args {
					parts = append(parts, string(a.Value)+a.Description)
				}
				msg = "console.error: " + strings.Join(parts, " ")
			}
		case *log.EventEntryAdded:
			// Content-Security-Policy violations and failed loads are reported here.
			if ev.Entry.Level == log.EntryLevelError {
				msg = fmt.Sprintf("log (%s): %s %s", ev.Entry.Source, ev.Entry.Text, ev.Entry.URL)
			}
		}
		if msg != "" {
			mu.Lock()
			seen = append(seen, msg)
			mu.Unlock()
		}
	})
	require.NoError(t, err, "starting the browser")
	_, err = chromedp.Call(ctx, log.Enable, cdp.Empty{})
	require.NoError(t, err, "enabling the log domain")
	_, err = chromedp.Call(ctx, runtime.Enable, cdp.Empty{})
	require.NoError(t, err, "enabling the runtime domain")
	return ctx, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

// choose selects value in a select element and fires its change event, as a user's pick does.
func choose(sel, value string) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		js := fmt.Sprintf(`(() => { const s = document.querySelector(%q);
			if (!s || ![...s.options].some(o => o.value === %q)) { return false; }
			s.value = %q; s.dispatchEvent(new Event('change', {bubbles: true})); return true; })()`, sel, value, value)
		ok, err := chromedp.Evaluate[bool](js)(ctx, tg)
		if err != nil {
			return chromedp.Void{}, err
		}
		if !ok {
			return chromedp.Void{}, fmt.Errorf("%s has no option %q", sel, value)
		}
		return chromedp.Void{}, nil
	}
}

// replace types text into an input or textarea in place of what it held.
func replace(sel, text string) chromedp.Action[chromedp.Void] {
	clear := chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`document.querySelector(%q).value = ''`, sel))
	return chromedp.Steps(clear, chromedp.SendKeys(chromedp.CSS(sel), text))
}

// waitFor polls a JavaScript condition until it holds (at most 30 s).
func waitFor(cond string) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		_, err := chromedp.Poll[chromedp.Void](cond, chromedp.WithPollingInterval(50*time.Millisecond))(ctx, tg)
		if err != nil {
			return chromedp.Void{}, fmt.Errorf("waiting for %s: %w", cond, err)
		}
		return chromedp.Void{}, nil
	}
}

// threadHas is a condition: a message of that direction ("in" to the agent, "out" from it) in
// the thread whose text or data contains want.
func threadHas(direction, want string) string {
	return fmt.Sprintf(`[...document.querySelectorAll('#thread li[data-direction=%q]')].some(li => li.textContent.includes(%q))`, direction, want)
}

// text reads an element's text.
func text(t *testing.T, ctx context.Context, id string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID(id)))
	require.NoError(t, err, "reading #%s", id)
	return s
}

// screenshot writes a PNG of the whole page under the test's temp dir, and into
// AGENTBUS_SCREENSHOT_DIR when that is set (the temp dir goes when the test ends).
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // quality 100 is a PNG, less a JPEG
	require.NoError(t, err, "taking a screenshot")
	shot := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(shot, png, 0o644))
	t.Logf("screenshot: %s (%d bytes)", shot, len(png))
	if dir := os.Getenv("AGENTBUS_SCREENSHOT_DIR"); dir != "" {
		keep := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(keep, png, 0o644))
		t.Logf("screenshot kept: %s", keep)
	}
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
