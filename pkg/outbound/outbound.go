// Package outbound is how agentbus reaches URLs that tenants give it: the receivers of event
// subscriptions (docs/subscriptions.md) and the endpoints of remote agents
// (docs/remote-agents.md). It holds the operator's allow-list of such URLs (AGENTBUS_OUTBOUND_URLS)
// and the dialer and HTTP client that refuse, on the address actually dialled, to connect a name
// to a loopback, private or otherwise internal address (server-side request forgery).
package outbound

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// AllowList is the operator's list of the receiver URLs tenants may subscribe
// (AGENTBUS_OUTBOUND_URLS, docs/subscriptions.md#the-allow-list). Each entry is a URL
// pattern: a scheme, a host, an optional port and an optional path prefix.
//
//   - https://hooks.example.com allows that host on port 443, any path;
//   - https://*.example.com allows every subdomain of example.com (not example.com itself);
//   - https://* allows every host;
//   - http://127.0.0.1:* allows loopback HTTP on any port (http is only for loopback hosts);
//   - https://hooks.example.com/agentbus/ allows only paths below /agentbus/.
//
// Names (not IP literals) must resolve to public addresses when an event is delivered: a
// pattern with a name or a wildcard never lets agentbus reach a loopback, private, link-local
// or otherwise internal address, whatever the name's DNS says. An entry that names an address
// (an IP literal, or localhost) allows that address itself.
type AllowList struct {
	entries []allowEntry
}

type allowEntry struct {
	scheme string
	// host is lowercase; "*" is any host, "*.x" any subdomain of x.
	host string
	// port is "*" for any, else the port number (the scheme's default when the entry has none).
	port   string
	path   string
	source string
}

// ParseAllowList reads a comma-separated list of URL patterns; an empty list allows nothing.
func ParseAllowList(v string) (*AllowList, error) {
	a := &AllowList{}
	for item := range strings.SplitSeq(v, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		e, err := parseAllowEntry(item)
		if err != nil {
			return nil, err
		}
		a.entries = append(a.entries, e)
	}
	return a, nil
}

func parseAllowEntry(item string) (allowEntry, error) {
	bad := func(why string) (allowEntry, error) {
		return allowEntry{}, fmt.Errorf("subscription URL pattern %q: %s", item, why)
	}
	scheme, rest, ok := strings.Cut(item, "://")
	if !ok || (scheme != "https" && scheme != "http") {
		return bad("want https://host[:port][/path] or http://127.0.0.1:port")
	}
	hostport, path, _ := strings.Cut(rest, "/")
	path = "/" + path
	host, port := hostport, defaultPort(scheme)
	if i := strings.LastIndexByte(hostport, ':'); i >= 0 && !strings.HasSuffix(hostport, "]") {
		host, port = hostport[:i], hostport[i+1:]
		if port != "*" && !validPort(port) {
			return bad("the port is not a number from 1 to 65535 or *")
		}
	}
	host = strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
	switch {
	case host == "":
		return bad("no host")
	case host == "*" || strings.HasPrefix(host, "*."):
		if strings.Contains(host[1:], "*") {
			return bad("* may only stand for the whole host or its leftmost labels")
		}
	case strings.Contains(host, "*"):
		return bad("* may only stand for the whole host or its leftmost labels")
	}
	if scheme == "http" && !loopbackName(host) {
		return bad("plain http is only allowed for loopback hosts (127.0.0.1, [::1], localhost)")
	}
	return allowEntry{scheme: scheme, host: host, port: port, path: path, source: item}, nil
}

func defaultPort(scheme string) string {
	if scheme == "http" {
		return "80"
	}
	return "443"
}

func validPort(p string) bool {
	n := 0
	for _, c := range p {
		if c < '0' || c > '9' {
			return false
		}
		n = n*10 + int(c-'0')
		if n > 65535 {
			return false
		}
	}
	return p != "" && n > 0
}

// loopbackName reports whether host names the local machine: localhost or a loopback address.
func loopbackName(host string) bool {
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// literal reports whether an entry's host names one address rather than a DNS name.
func (e allowEntry) literal() bool {
	if e.host == "localhost" {
		return true
	}
	_, err := netip.ParseAddr(e.host)
	return err == nil
}

func (e allowEntry) matches(u *url.URL) bool {
	if u.Scheme != e.scheme {
		return false
	}
	host := strings.ToLower(u.Hostname())
	switch {
	case e.host == "*":
	case strings.HasPrefix(e.host, "*."):
		if !strings.HasSuffix(host, e.host[1:]) || len(host) == len(e.host)-1 {
			return false
		}
	case host != e.host:
		return false
	}
	port := u.Port()
	if port == "" {
		port = defaultPort(u.Scheme)
	}
	if e.port != "*" && port != e.port {
		return false
	}
	return strings.HasPrefix(u.EscapedPath()+"/", e.path) || (e.path == "/" && u.EscapedPath() == "")
}

// Empty reports whether the list allows nothing.
func (a *AllowList) Empty() bool { return a == nil || len(a.entries) == 0 }

// String is the list as it was given, normalised.
func (a *AllowList) String() string {
	if a == nil {
		return ""
	}
	s := make([]string, len(a.entries))
	for i, e := range a.entries {
		s[i] = e.source
	}
	return strings.Join(s, ",")
}

// ErrURLNotAllowed refuses a receiver URL that no entry of the allow-list matches.
var ErrURLNotAllowed = errors.New("the URL is not on the operator's allow-list for subscriptions")

// Check parses a receiver URL and checks it against the list: an absolute http(s) URL without
// user information or fragment that an entry matches. It returns whether the matching entry
// names an address (see AllowList), which the delivery then may dial even if it is internal.
func (a *AllowList) Check(raw string) (u *url.URL, literal bool, err error) {
	u, err = url.Parse(raw)
	if err != nil || !u.IsAbs() || u.Host == "" || u.Opaque != "" {
		return nil, false, errors.New("the URL is not an absolute http or https URL")
	}
	if u.User != nil || u.Fragment != "" {
		return nil, false, errors.New("the URL may not carry user information or a fragment")
	}
	if a != nil {
		for _, e := range a.entries {
			if e.matches(u) {
				return u, e.literal(), nil
			}
		}
	}
	return nil, false, ErrURLNotAllowed
}

// ErrInternalAddress refuses to dial an internal address for a name.
var ErrInternalAddress = errors.New("the receiver's name resolves to an internal address")

// internal reports whether an address is not a public unicast address: loopback, private,
// link-local, unspecified, multicast, carrier-grade NAT, or an IPv4-mapped form of those.
func internal(ip netip.Addr) bool {
	ip = ip.Unmap()
	cgnat := netip.MustParsePrefix("100.64.0.0/10")
	return !ip.IsGlobalUnicast() || ip.IsPrivate() || ip.IsLoopback() || ip.IsLinkLocalUnicast() ||
		ip.IsInterfaceLocalMulticast() || cgnat.Contains(ip)
}

// Dialer returns the dialer of NewClient's connections: each dial bounded by timeout and, unless
// anyAddress, refused (ErrInternalAddress) for an internal address, checked on the address
// actually dialled.
func Dialer(timeout time.Duration, anyAddress bool) *net.Dialer {
	dialer := &net.Dialer{Timeout: timeout}
	if !anyAddress {
		dialer.Control = func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil || internal(ap.Addr()) {
				return ErrInternalAddress
			}
			return nil
		}
	}
	return dialer
}

// NewClient returns the HTTP client deliveries are made with: no proxy from the environment, no
// redirects followed (a 3xx is a failed delivery), each attempt bounded by timeout, and, unless
// anyAddress, no connection to an internal address (checked on the address actually dialled,
// so that a DNS answer that changes after the check does not get around it).
func NewClient(timeout time.Duration, anyAddress bool) *http.Client {
	dialer := Dialer(timeout, anyAddress)
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			Proxy:                 nil,
			DialContext:           dialer.DialContext,
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          256,
			MaxIdleConnsPerHost:   4,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   timeout,
			ResponseHeaderTimeout: timeout,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
