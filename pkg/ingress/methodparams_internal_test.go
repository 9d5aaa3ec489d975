package ingress

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/registry"
)

// sumAgent is a registration whose Data method sum requires values, as Echo's does.
func sumAgent(schema string) registry.Agent {
	return registry.Agent{Name: "Calc", DataMethods: []string{"sum", "free"}, Methods: []registry.Method{
		{Name: "free", InputSchema: json.RawMessage(`{"type":"object"}`)},
		{Name: "Sum", InputSchema: json.RawMessage(schema)},
	}}
}

const sumSchema = `{"type":"object","properties":{"values":{"type":"array","items":{"type":"number"}}},"required":["values"]}`

// A schema is compiled once per registration: the same schema is not compiled again, a
// replaced one is, and a schema that constrains nothing is not checked.
func TestMethodParamsCompiledPerRegistration(t *testing.T) {
	var c methodParams
	log := slog.New(slog.DiscardHandler)
	a := sumAgent(sumSchema)
	p := c.check(log, a, "SUM", []byte(`{}`))
	require.NotNil(t, p)
	assert.Equal(t, "invalid-method-parameters", p.Slug)
	assert.Equal(t, "the parameters of Sum do not match its schema: missing property 'values'", p.Detail)
	assert.Nil(t, c.check(log, a, "sum", []byte(`{"values":[1]}`)))
	first := c.m[methodKey{"Calc", "Sum"}].v
	require.NotNil(t, first)
	assert.Nil(t, c.check(log, sumAgent(sumSchema), "sum", []byte(`{"values":[]}`)))
	assert.Same(t, first, c.m[methodKey{"Calc", "Sum"}].v, "an equal schema is not compiled again")

	replaced := sumAgent(`{"type":"object","properties":{"values":{"type":"array"}}}`)
	assert.Nil(t, c.check(log, replaced, "sum", []byte(`{}`)), "the replaced registration's schema applies")
	assert.NotSame(t, first, c.m[methodKey{"Calc", "Sum"}].v)

	assert.Nil(t, c.check(log, a, "free", []byte(`{"anything":1}`)))
	assert.NotContains(t, c.m, methodKey{"Calc", "free"}, "nothing to check, nothing compiled")
	assert.Nil(t, c.check(log, registry.Agent{Name: "Old", DataMethods: []string{"m"}}, "m", []byte(`{}`)), "a registration without schemas")
	assert.Nil(t, c.check(log, sumAgent(`{"type":"nonsense"}`), "sum", []byte(`{}`)), "a schema that does not compile checks nothing")
}

// The cache starts over rather than grow past its bound.
func TestMethodParamsBounded(t *testing.T) {
	var c methodParams
	log := slog.New(slog.DiscardHandler)
	for i := range maxCompiledParams + 10 {
		a := sumAgent(sumSchema)
		a.Name = fmt.Sprint("A", i)
		c.check(log, a, "sum", nil)
	}
	assert.LessOrEqual(t, len(c.m), maxCompiledParams)
}

// BenchmarkMethodParamsCheck is what the ingress adds to a call of a method with a schema:
// finding the compiled schema of the registration and checking the parameters.
func BenchmarkMethodParamsCheck(b *testing.B) {
	var c methodParams
	log := slog.New(slog.DiscardHandler)
	a := sumAgent(sumSchema)
	params := []byte(`{"values":[1,2,3.5]}`)
	b.ReportAllocs()
	for b.Loop() {
		if p := c.check(log, a, "sum", params); p != nil {
			b.Fatal(p.Detail)
		}
	}
}

// BenchmarkMethodParamsCheckNoSchema is the same for a method without a schema of its own.
func BenchmarkMethodParamsCheckNoSchema(b *testing.B) {
	var c methodParams
	log := slog.New(slog.DiscardHandler)
	a := sumAgent(sumSchema)
	params := []byte(`{"values":[1,2,3.5]}`)
	b.ReportAllocs()
	for b.Loop() {
		if p := c.check(log, a, "free", params); p != nil {
			b.Fatal(p.Detail)
		}
	}
}
