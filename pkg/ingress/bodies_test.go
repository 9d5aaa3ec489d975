package ingress_test

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/ingress"
	"github.com/agentbus/agentbus/pkg/stack"
)

// TestBodiesHeldPerTenant: bodies sent slowly without a key (to send, which reads its body before
// the key, as the key may be in it), then a tenant's slow webhook bodies, hold their owner's
// budget of body memory: the next body of the same owner is refused with 503 too-many-body-bytes
// while another tenant's, and a keyed send, go through; once the slow bodies end, the budget is
// given back.
func TestBodiesHeldPerTenant(t *testing.T) {
	t.Parallel()
	const kib, mib = 1 << 10, 1 << 20
	s := startStack(t, stack.Config{Ingress: ingress.Config{
		MaxBodyBytes: mib, MaxFileBytes: mib, MaxBodyBytesPerTenant: 3 * mib,
	}}, "default", "other")
	addr := strings.TrimPrefix(s.URL, "http://")
	sendPath := "/api/v1/admin/messaging/send"
	webhookPath := func(key string) string { return "/api/user/webhooks/Echo/echo?apikey=" + url.QueryEscape(key) }
	body := func(n int) []byte { return bytes.Repeat([]byte("x"), n) }

	// refused reports whether a POST of n bytes to u (with hdr) is answered 503
	// too-many-body-bytes; any other answer is one of the others the route gives such a body.
	refused := func(u string, n int, hdr ...string) bool {
		status, ct, b := doCT(t, http.MethodPost, s.URL+u, bytes.NewReader(body(n)), hdr...)
		if status != http.StatusServiceUnavailable {
			return false
		}
		p := problemOf(t, status, ct, b, http.StatusServiceUnavailable)
		return p["type"] == "urn:agentbus:problem:too-many-body-bytes"
	}

	// Without a key: two sends of 1 MiB that stop short of their end hold a buffer of their
	// length each (the buffer doubles up to the announced length), 2 MiB of the 3 MiB shared by
	// the bodies of no known tenant; the next body of a little over 1 MiB does not fit.
	anon := []net.Conn{
		slowBody(t, addr, sendPath, mib, 1000*kib),
		slowBody(t, addr, sendPath, mib, 1000*kib),
	}
	heldBytes(t, s.URL, 2*mib)
	status, ct, b := doCT(t, http.MethodPost, s.URL+sendPath, bytes.NewReader(body(mib+kib)))
	p := problemOf(t, status, ct, b, http.StatusServiceUnavailable)
	assert.Contains(t, p["detail"], "without a known API key")
	assert.False(t, refused(sendPath, mib+kib, "Authorization", "Bearer "+s.Key), "a send with the tenant's key in its header")
	status, _, b = call(t, s.URL, "Echo", "echo", q("apikey", s.Key), body(mib-1000))
	assert.Equal(t, http.StatusOK, status, "the tenant's webhook call: %.200s", b)

	// The tenant's own budget: three slow webhook bodies of 1 MiB hold all of its 3 MiB, its
	// next body is refused; the other tenant's is not.
	held := []net.Conn{
		slowBody(t, addr, webhookPath(s.Key), mib, 950*kib),
		slowBody(t, addr, webhookPath(s.Key), mib, 950*kib),
		slowBody(t, addr, webhookPath(s.Key), mib, 950*kib),
	}
	heldBytes(t, s.URL, 5*mib)
	status, h, b := doRequest(t, http.MethodPost, s.URL+webhookPath(s.Key), bytes.NewReader(body(kib)))
	p = problemOf(t, status, h.Get("Content-Type"), b, http.StatusServiceUnavailable)
	assert.Equal(t, "1", h.Get("Retry-After"), "a refusal's Retry-After")
	assert.Contains(t, p["detail"], "of this tenant")
	status, _, b = call(t, s.URL, "Echo", "echo", q("apikey", s.OtherKey), body(mib))
	assert.Equal(t, http.StatusOK, status, "the other tenant's webhook call: %.200s", b)

	// The slow bodies end: their bytes are given back.
	for _, c := range append(anon, held...) {
		require.NoError(t, c.Close())
	}
	heldBytes(t, s.URL, 0)
	status, _, b = call(t, s.URL, "Echo", "echo", q("apikey", s.Key), body(mib))
	assert.Equal(t, http.StatusOK, status, "the tenant's webhook call once its slow bodies ended: %.200s", b)
	assert.False(t, refused(sendPath, mib+kib), "a send without a key once the slow bodies ended")
}

// heldBytes waits until the ingress holds n bytes of memory for request bodies.
func heldBytes(t *testing.T, base string, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return metricValue(t, base, "agentbus_ingress_body_bytes") == float64(n) },
		10*time.Second, 20*time.Millisecond, "the ingress never held the slow bodies' %d bytes", n)
}

// slowBody opens a connection to addr and writes a POST of path announcing a body of size
// bytes, then only sent of them; the connection closes when the test ends.
func slowBody(t *testing.T, addr, path string, size, sent int) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	_, err = fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", path, addr, size)
	require.NoError(t, err)
	_, err = conn.Write(bytes.Repeat([]byte("x"), sent))
	require.NoError(t, err)
	return conn
}
