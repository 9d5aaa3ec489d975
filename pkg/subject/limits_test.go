package subject_test

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/subject"
)

func TestCheckText(t *testing.T) {
	for _, tc := range []struct {
		name, v string
		max     int
		reason  string
	}{
		{"empty", "", 10, ""},
		{"at the limit", "abcdefghij", 10, ""},
		{"unicode at the limit", "日本語a", 10, ""},
		{"spaces, dots, slashes, colons, wildcards", "a b.c/d:e*>", 20, ""},
		{"over the limit", "abcdefghijk", 10, "is longer than 10 bytes"},
		{"NUL", "a\x00b", 10, "contains a control character"},
		{"newline", "a\nb", 10, "contains a control character"},
		{"tab", "a\tb", 10, "contains a control character"},
		{"escape", "a\x1b[1m", 10, "contains a control character"},
		{"DEL", "a\x7f", 10, "contains a control character"},
		{"C1 control", "a\u0085b", 10, "contains a control character"},
		{"invalid UTF-8", "a\xffb", 10, "is not valid UTF-8"},
		{"truncated UTF-8", "a\xe6\x97", 10, "is not valid UTF-8"},
		{"replacement character", "a\uFFFDb", 10, "is not valid UTF-8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := subject.CheckText("the field", tc.v, tc.max)
			if tc.reason == "" {
				assert.NoError(t, err)
				return
			}
			var ve *subject.ValueError
			require.True(t, errors.As(err, &ve), "%v", err)
			assert.Equal(t, "the field", ve.Field)
			assert.Equal(t, tc.reason, ve.Reason)
			assert.Equal(t, "the field "+tc.reason, err.Error())
		})
	}
}

func TestChecks(t *testing.T) {
	long := func(n int) string { return strings.Repeat("a", n) }
	ok := func(err error) bool { return err == nil }
	assert.True(t, ok(subject.CheckTenant("t", "Acme_corp-01")))
	assert.True(t, ok(subject.CheckTenant("t", long(64))))
	for _, bad := range []string{"", long(65), "a.b", "a b", "a*", "é", "a\x00"} {
		assert.False(t, ok(subject.CheckTenant("t", bad)), "tenant %q", bad)
	}
	assert.True(t, ok(subject.CheckID("id", "sub_0123abcd")))
	assert.True(t, ok(subject.CheckID("id", "5f0c4a1e-3b2d-4c7e-9a8b-1234567890ab")))
	for _, bad := range []string{"", long(65), "a.b", "a/b", ">", "a\xff"} {
		assert.False(t, ok(subject.CheckID("id", bad)), "id %q", bad)
	}
	assert.True(t, ok(subject.CheckNumber("n", "18446744073709551615")))
	for _, bad := range []string{"", "-1", "+1", "1.0", "abc", long(21)} {
		assert.False(t, ok(subject.CheckNumber("n", bad)), "number %q", bad)
	}
	assert.True(t, ok(subject.CheckName("n", long(256))))
	for _, bad := range []string{"", long(257), "a\x00"} {
		assert.False(t, ok(subject.CheckName("n", bad)), "name %q", bad)
	}
	assert.True(t, ok(subject.CheckRequestID("r", long(200))))
	for _, bad := range []string{"", long(201), "a\r\nb"} {
		assert.False(t, ok(subject.CheckRequestID("r", bad)), "request id %q", bad)
	}
	assert.True(t, ok(subject.CheckParam("p", "")))
	assert.False(t, ok(subject.CheckParam("p", long(1025))))
}

func TestQuote(t *testing.T) {
	assert.Equal(t, `"a\nb"`, subject.Quote("a\nb"))
	assert.Equal(t, `"`+strings.Repeat("x", 80)+`"…`, subject.Quote(strings.Repeat("x", 10_000)))
	// Cut at a character's start: 79 ASCII bytes and a 3-byte character straddling 80.
	q := subject.Quote(strings.Repeat("x", 79) + "日本")
	assert.Equal(t, `"`+strings.Repeat("x", 79)+`"…`, q)
}

// TestSubjectsStayWithinTheLimit builds every subject, key and object name a caller's value
// reaches from the longest values the limits allow, and checks them against MaxSubjectBytes,
// and what NATS puts around them (a key-value bucket's $KV prefix, a direct get's API subject)
// against the protocol's 4096 bytes with room left for the verb and a reply subject.
func TestSubjectsStayWithinTheLimit(t *testing.T) {
	tenant := strings.Repeat("t", subject.MaxTenantBytes)
	name := strings.Repeat("n", subject.MaxNameBytes)
	// A name's characters may take four bytes each; base64 grows with bytes, not characters.
	wf := tenant + ":" + name + ":" + name + ":" + name
	require.Len(t, wf, subject.MaxWorkflowIDBytes)
	participant := strings.Repeat("p", subject.MaxNameBytes)
	a2a := "agent:" + strings.Repeat("ⱥ", subject.MaxNameBytes/2) // lowercase of Ⱥ: 2 bytes grow to 3
	require.Len(t, a2a, 390)
	requestID := strings.Repeat("r", subject.MaxRequestIDBytes)
	id := strings.Repeat("i", subject.MaxIDBytes)
	timer := strings.Repeat("s", 128)

	subjects := map[string]string{}
	for _, p := range []string{participant, a2a} {
		subjects["Inbox"] = longest(subjects["Inbox"], subject.Inbox(name, tenant, wf, p))
		subjects["Thread"] = longest(subjects["Thread"], subject.Thread(tenant, wf, p))
		subjects["DeadLetter"] = longest(subjects["DeadLetter"], subject.DeadLetter(tenant, name, wf, p))
		subjects["TopicsKey"] = longest(subjects["TopicsKey"], subject.TopicsKey(tenant, wf, p))
	}
	// The inbox stores a request under its partition, a token more.
	subjects["Inbox"] += ".1023"
	for k, v := range map[string]string{
		"InstanceInbox": subject.InstanceInbox(name, 1023, tenant, wf), "Partition": subject.Partition(name, 1023),
		"InstanceKey": subject.InstanceKey(tenant, wf), "ResultKey": subject.ResultKey(tenant, requestID),
		"AgentKey": subject.AgentKey(name), "InstanceDeadLetters": subject.InstanceDeadLetters(tenant, name, wf),
		"AgentDeadLetters": subject.AgentDeadLetters(tenant, name), "Runs": subject.Runs(tenant, name),
		"InstanceNotice": subject.InstanceNotice(tenant, wf), "InstanceThreads": subject.InstanceThreads(tenant, wf),
		"Schedule": subject.Schedule(subject.TimerShards-1, tenant, wf, timer), "ScheduleFired": subject.ScheduleFired(subject.TimerShards-1, tenant, wf, timer),
		"InstanceSchedules": subject.InstanceSchedules(subject.TimerShards-1, tenant, wf), "SubscriptionKey": subject.SubscriptionKey(tenant, id),
		"Undelivered": subject.Undelivered(tenant, id), "TenureKey": subject.TenureKey(name, 1023),
		// An object's metadata subject holds its name in base64.
		"ClaimName": "$O.AGENTBUS_CLAIMS.M." + base64.URLEncoding.EncodeToString([]byte(subject.ClaimName(tenant, requestID, "request"))),
	} {
		subjects[k] = v
	}
	const protocolLine, room = 4096, 512
	for k, s := range subjects {
		assert.LessOrEqual(t, len(s), subject.MaxSubjectBytes, "%s is %d bytes", k, len(s))
		framed := "$JS.API.DIRECT.GET.KV_AGENTBUS_INSTANCES.$KV.AGENTBUS_INSTANCES." + s
		assert.LessOrEqual(t, len(framed), protocolLine-room, "%s in a direct get of a key is %d bytes", k, len(framed))
	}
	t.Logf("the longest subject: %d bytes of MaxSubjectBytes %d", maxLen(subjects), subject.MaxSubjectBytes)
}

func longest(a, b string) string {
	if len(b) > len(a) {
		return b
	}
	return a
}

func maxLen(m map[string]string) int {
	n := 0
	for _, s := range m {
		n = max(n, len(s))
	}
	return n
}
