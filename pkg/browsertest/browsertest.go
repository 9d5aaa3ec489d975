// Package browsertest runs the ingress's browser pages (the playground, the operator console) in
// a headless Chromium for tests, through chromedp and the DevTools protocol: find a browser or
// skip, start it bound to the test, wait for conditions in the page, and keep screenshots.
package browsertest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// BrowserNames are the Chromium builds the browser tests look for in PATH, in this order.
// AGENTBUS_CHROMIUM names one elsewhere. .ci/run's find_browser looks for the same.
var BrowserNames = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}

// FindBrowser returns the path of a Chromium binary, or skips the test saying why.
func FindBrowser(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("AGENTBUS_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range BrowserNames {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skipf("chromium not found: none of %s is in PATH (set AGENTBUS_CHROMIUM to a Chromium binary; "+
		".ci/run installs Debian's chromium when apt-get is available), so the page was not tested in a browser",
		strings.Join(BrowserNames, ", "))
	return ""
}

// Start starts a headless Chromium for the test and returns its context, bounded by timeout.
// The browser is closed and its process waited for when the test ends. Everything the page logs
// as an error, and every uncaught exception, is collected in problems.
func Start(t *testing.T, timeout time.Duration) (ctx context.Context, problems func() []string) {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(FindBrowser(t)),
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

// Choose selects value in a select element and fires its change event, as a user's pick does.
func Choose(sel, value string) chromedp.Action[chromedp.Void] {
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

// Replace types text into an input or textarea in place of what it held.
func Replace(sel, text string) chromedp.Action[chromedp.Void] {
	clear := chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`document.querySelector(%q).value = ''`, sel))
	return chromedp.Steps(clear, chromedp.SendKeys(chromedp.CSS(sel), text))
}

// WaitFor polls a JavaScript condition until it holds (at most 30 s).
func WaitFor(cond string) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		_, err := chromedp.Poll[chromedp.Void](cond, chromedp.WithPollingInterval(50*time.Millisecond))(ctx, tg)
		if err != nil {
			return chromedp.Void{}, fmt.Errorf("waiting for %s: %w", cond, err)
		}
		return chromedp.Void{}, nil
	}
}

// Text reads an element's text.
func Text(t *testing.T, ctx context.Context, id string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID(id)))
	require.NoError(t, err, "reading #%s", id)
	return s
}

// Screenshot writes a PNG of the whole page under the test's temp dir, and into
// AGENTBUS_SCREENSHOT_DIR when that is set (the temp dir goes when the test ends).
func Screenshot(t *testing.T, ctx context.Context, name string) {
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
