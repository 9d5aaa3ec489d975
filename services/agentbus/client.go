package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"github.com/agentbus/agentbus/pkg/problem"
)

// maxAnswer bounds a JSON answer read into memory.
const maxAnswer = 64 << 20

// apiError is an error answer of the API: a problem+json, or any other non-2xx answer.
type apiError struct {
	Status int
	Title  string
	Detail string
}

func (e *apiError) Error() string {
	s := fmt.Sprintf("%s (%d)", e.Title, e.Status)
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// request builds a request to path (with its query) on the ingress, with the key.
func (c *cli) request(ctx context.Context, method, path string, query url.Values, body io.Reader) (*http.Request, error) {
	base, err := url.Parse(c.url)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, fmt.Errorf("-url %q is not an http or https URL", c.url)
	}
	if base.User != nil || base.RawQuery != "" {
		return nil, errors.New("-url must not carry credentials or a query; give the key with -key or AGENTBUS_KEY")
	}
	u := strings.TrimSuffix(base.String(), "/") + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	if c.key == "" {
		return nil, errors.New("no API key: set AGENTBUS_KEY (or -key)")
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set("User-Agent", "agentbus-cli")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req, nil
}

// do sends a request and returns the answer when its status is 2xx; any other answer is read
// and returned as an *apiError. The caller closes the body.
func (c *cli) do(req *http.Request) (*http.Response, error) {
	resp, err := c.http.Do(req)
	if err != nil {
		if ctxErr := req.Context().Err(); ctxErr != nil {
			return nil, ctxErr
		}
		// Only the cause: the URL holds no key, but its query makes the message long.
		var ue *url.Error
		if errors.As(err, &ue) {
			return nil, fmt.Errorf("%s: %w", c.url, ue.Err)
		}
		return nil, err
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp, nil
	}
	defer resp.Body.Close()
	return nil, readProblem(resp)
}

// readProblem turns an error answer into an *apiError.
func readProblem(resp *http.Response) error {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e := &apiError{Status: resp.StatusCode, Title: http.StatusText(resp.StatusCode)}
	if e.Title == "" {
		e.Title = "HTTP error"
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt == "application/problem+json" || mt == "application/json" {
		var p problem.Body
		if json.Unmarshal(raw, &p) == nil {
			if p.Title != "" {
				e.Title = p.Title
			}
			e.Detail = p.Detail
			return e
		}
	}
	e.Detail = oneLine(string(raw), 200)
	return e
}

// oneLine is s on one line, trimmed and cut to at most n bytes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}

// call sends a request with an optional JSON body and decodes the JSON answer into out (when
// not nil); it returns the raw answer for -json.
func (c *cli) call(ctx context.Context, method, path string, query url.Values, in, out any) (json.RawMessage, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := c.request(ctx, method, path, query, body)
	if err != nil {
		return nil, err
	}
	resp, err := c.do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return nil, fmt.Errorf("reading the answer: %w", err)
	}
	if out != nil && len(bytes.TrimSpace(raw)) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			return nil, fmt.Errorf("the answer is not the JSON expected: %w", err)
		}
	}
	return raw, nil
}

// fetch is call for a command that prints the answer: with -json it prints the raw answer
// itself and reports printed, and the command prints nothing more.
func (c *cli) fetch(ctx context.Context, method, path string, query url.Values, in, out any) (printed bool, err error) {
	raw, err := c.call(ctx, method, path, query, in, out)
	if err != nil || !c.json {
		return false, err
	}
	c.printJSON(raw)
	return true, nil
}

// printJSON prints a raw JSON answer on one line, as it came.
func (c *cli) printJSON(raw []byte) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return
	}
	var buf bytes.Buffer
	if json.Compact(&buf, raw) == nil {
		raw = buf.Bytes()
	}
	fmt.Fprintf(c.stdout, "%s\n", raw)
}

// tenantPath is the admin path of the current tenant.
func (c *cli) tenantPath() string {
	return "/api/v1/admin/tenants/" + url.PathEscape(c.tenant)
}
