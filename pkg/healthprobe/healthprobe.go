// Package healthprobe is the client side of the services' health endpoints: it lets a binary
// check a copy of itself running in the same container (`/app healthcheck`), because the
// distroless images have no shell, curl or wget for a Compose or Docker health check to run.
//
// It asks one address once and says whether the answer was 200 OK. It is not a monitoring
// client: no retries, no metrics, and it never goes through an HTTP proxy.
package healthprobe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Timeout bounds a check whose context has no deadline. Docker kills a health check that
// outlives its own timeout (3 s in docker-compose.yml) and counts a failure without a message;
// ending first leaves a line in `docker inspect` that says why.
const Timeout = 2 * time.Second

// maxBody is how much of an unhealthy answer's body goes into the error: enough for a status
// document or a problem detail, while the error stays one short line.
const maxBody = 256

// StatusError is an answer other than 200 OK.
type StatusError struct {
	URL    string
	Status int
	// Body is the start of the answer's body, on one line.
	Body string
}

func (e *StatusError) Error() string {
	msg := fmt.Sprintf("GET %s: %d %s", e.URL, e.Status, http.StatusText(e.Status))
	if e.Body != "" {
		msg += ": " + e.Body
	}
	return msg
}

// LocalURL returns the http URL of path on a server that listens on addr (host:port, as the
// AGENTBUS_*_ADDR settings take it), seen from the same machine or container: a listener on
// every interface (an empty host, 0.0.0.0 or [::]) is reached on 127.0.0.1.
func LocalURL(addr, path string) (string, error) {
	if addr == "" {
		return "", errors.New("no listen address")
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("listen address %q: %w", addr, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		// Port 0 means "any free port": the server's real port cannot be known from outside.
		return "", fmt.Errorf("listen address %q: port %q is not 1 to 65535", addr, port)
	}
	switch host {
	case "", "0.0.0.0", "::":
		host = "127.0.0.1"
	}
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	return "http://" + net.JoinHostPort(host, port) + path, nil
}

// Check sends GET path to the server listening on addr (see LocalURL) and returns nil if it
// answers 200 OK, a *StatusError for any other status, and another error if it does not answer.
// Without a deadline on ctx it gives up after Timeout.
func Check(ctx context.Context, addr, path string) error {
	url, err := LocalURL(addr, path)
	if err != nil {
		return err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, Timeout)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("building request for %s: %w", url, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("checking %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	return &StatusError{URL: url, Status: resp.StatusCode, Body: strings.Join(strings.Fields(string(body)), " ")}
}

// client asks the process itself: never through a proxy from the environment, no connection kept
// for a next check that runs in another process, and a redirect is an answer, not 200.
var client = &http.Client{
	Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true},
	CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	},
}
