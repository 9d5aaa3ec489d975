// Package agentbusv1 is the generated Go code of the bus wire schema (bus.proto): the request
// envelope ingress publishes and the reply a workflow host sends back.
//
// Regenerate after editing bus.proto with `go generate ./proto/...`; the generators are pinned
// as Go tools in tools/go.mod, so nothing needs installing. It also writes generated.sum, the
// checksums of the generation's inputs and outputs: CI runs the generator only when a file differs
// from them (.ci/proto-sum), and fails when the committed code is stale.
package agentbusv1

//go:generate sh -c "cd ../../.. && GOWORK=off go tool -modfile=tools/go.mod buf generate"
//go:generate ../../../.ci/proto-sum write
