package agent

import (
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"

	agentbusv1 "github.com/agentbus/agentbus/proto/agentbus/v1"
)

// messageID names messages as uuid.NewSHA1 over the tenant, the request id and the part did
// before it (stored threads keep those ids: a redelivery must find them), also for request ids
// longer than its stack buffer.
func TestMessageIDIsNameBasedUUID(t *testing.T) {
	for _, requestID := range []string{"r1", "", "ünïcode id", strings.Repeat("long", 100)} {
		req := &agentbusv1.Request{TenantId: "acme", RequestId: requestID}
		for _, part := range []string{"", "out", "dead", "tool.1.in"} {
			data := "acme\x00" + requestID
			if part != "" {
				data += "\x00" + part
			}
			want := uuid.NewSHA1(uuid.NameSpaceOID, []byte(data)).String()
			assert.Equal(t, want, messageID(req, part), "request %q part %q", requestID, part)
		}
	}
}

func BenchmarkMessageID(b *testing.B) {
	req := &agentbusv1.Request{TenantId: "default", RequestId: "0b5e8e3c-6c5b-4d44-9a8e-5f3c2d1b0a99"}
	b.ReportAllocs()
	for b.Loop() {
		_ = messageID(req, "out")
	}
}
