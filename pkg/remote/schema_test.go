package remote_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/jsonschema"
	"github.com/agentbus/agentbus/pkg/remote"
)

var update = flag.Bool("update", false, "rewrite docs/remote-agent-protocol.schema.json from the Go types")

// schemaFile is the JSON Schema of the protocol's request and answer, for agent authors.
var schemaFile = filepath.Join("..", "..", "docs", "remote-agent-protocol.schema.json")

// The protocol's JSON Schema in docs/ is the one the Go types the hosts encode and decode say:
// a field added to a request or an answer without the schema fails here
// (go test ./pkg/remote -run TestProtocolSchema -update rewrites it).
func TestProtocolSchema(t *testing.T) {
	defs := map[string]any{}
	for name, v := range map[string]any{"Request": remote.Request{}, "Answer": remote.Answer{}} {
		s, err := jsonschema.For(reflect.TypeOf(v))
		require.NoError(t, err, name)
		defs[name] = s
	}
	doc := map[string]any{
		"$schema":     "https://json-schema.org/draft/2020-12/schema",
		"$id":         "https://agentbus.dev/schemas/remote-agent-protocol-1.json",
		"title":       "agentbus remote agent protocol, version 1",
		"description": "A workflow host POSTs a Request (JSON, signed per Standard Webhooks) to a remote agent's URL; the agent answers with an Answer, or, when the request has stream: true, with {\"delta\": text} objects ending with an Answer, as NDJSON lines or as the data of server-sent events. docs/remote-agents.md describes every field.",
		"$defs":       defs,
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	require.NoError(t, enc.Encode(doc))
	if *update {
		require.NoError(t, os.WriteFile(schemaFile, b.Bytes(), 0o644))
	}
	have, err := os.ReadFile(schemaFile)
	require.NoError(t, err)
	require.Equal(t, b.String(), string(have), "%s is not the protocol's schema; run go test ./pkg/remote -run TestProtocolSchema -update", schemaFile)
}
