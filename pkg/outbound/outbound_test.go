package outbound

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAllowList(t *testing.T) {
	a, err := ParseAllowList(" https://hooks.example.com , https://*.example.org:8443/agentbus/, http://127.0.0.1:*, http://localhost:8080")
	require.NoError(t, err)
	for url, want := range map[string]bool{
		"https://hooks.example.com/x":            true,
		"https://HOOKS.example.com":              true,
		"https://hooks.example.com:443/x?y=1":    true,
		"https://hooks.example.com:8443/x":       false,
		"http://hooks.example.com/x":             false,
		"https://evil.com/hooks.example.com":     false,
		"https://a.example.org:8443/agentbus/x":  true,
		"https://a.b.example.org:8443/agentbus/": true,
		"https://example.org:8443/agentbus/x":    false,
		"https://a.example.org:8443/other":       false,
		"https://a.example.org:8443/agentbusx":   false,
		"https://aexample.org:8443/agentbus/x":   false,
		"http://127.0.0.1:9999/hook":             true,
		"http://localhost:8080/hook":             true,
		"http://localhost:8081/hook":             false,
		"http://10.1.2.3/hook":                   false,
		"https://user:pw@hooks.example.com/":     false,
		"https://hooks.example.com/#frag":        false,
		"ftp://hooks.example.com/":               false,
		"/relative":                              false,
	} {
		_, _, err := a.Check(url)
		assert.Equal(t, want, err == nil, "%s: %v", url, err)
	}
	for _, bad := range []string{"ftp://x", "hooks.example.com", "http://example.com", "https://a.*.com", "https://x:0", "https://x:99999", "https://"} {
		_, err := ParseAllowList(bad)
		assert.Error(t, err, bad)
	}
	empty, err := ParseAllowList("")
	require.NoError(t, err)
	assert.True(t, empty.Empty())
	_, _, err = empty.Check("https://hooks.example.com")
	assert.ErrorIs(t, err, ErrURLNotAllowed)
}

// A name or wildcard entry never reaches an internal address: the address dialled is checked.
func TestDeliveryRefusesInternalAddressesForNames(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(204) }))
	defer srv.Close()
	public := NewClient(time.Second, false)
	resp, err := public.Post(srv.URL, "application/json", nil)
	if resp != nil {
		resp.Body.Close()
	}
	require.ErrorIs(t, err, ErrInternalAddress)
	resp, err = NewClient(time.Second, true).Post(srv.URL, "application/json", nil)
	require.NoError(t, err)
	resp.Body.Close()
}

func TestDeliveryFollowsNoRedirect(t *testing.T) {
	srv := httptest.NewServer(http.RedirectHandler("http://169.254.169.254/", http.StatusFound))
	defer srv.Close()
	resp, err := NewClient(time.Second, true).Get(srv.URL)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusFound, resp.StatusCode)
}
