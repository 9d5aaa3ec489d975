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
	first := c.m["Calc"]["Sum"].lazy
	require.NotNil(t, first)
	assert.Nil(t, c.check(log, sumAgent(sumSchema), "sum", []byte(`{"values":[]}`)))
	assert.Same(t, first, c.m["Calc"]["Sum"].lazy, "an equal schema is not compiled again")
	held := c.compiled.Held()
	assert.Positive(t, held)

	replaced := sumAgent(`{"type":"object","properties":{"values":{"type":"array"}}}`)
	assert.Nil(t, c.check(log, replaced, "sum", []byte(`{}`)), "the replaced registration's schema applies")
	assert.NotSame(t, first, c.m["Calc"]["Sum"].lazy)
	assert.Greater(t, c.compiled.Held(), held, "compiled when used")

	assert.Nil(t, c.check(log, a, "free", []byte(`{"anything":1}`)))
	assert.NotContains(t, c.m["Calc"], "free", "nothing to check, nothing compiled")
	assert.Nil(t, c.check(log, registry.Agent{Name: "Old", DataMethods: []string{"m"}}, "m", []byte(`{}`)), "a registration without schemas")
	assert.Nil(t, c.check(log, sumAgent(`{"type":"nonsense"}`), "sum", []byte(`{}`)), "a schema that does not compile checks nothing")
}

// The cache does not grow past its bound: past it, the agent with the most schemas kept loses
// them, not the others, so one agent's many methods called in turn do not cost the calls of
// other agents a compilation each.
func TestMethodParamsBounded(t *testing.T) {
	var c methodParams
	log := slog.New(slog.DiscardHandler)
	many := func(name string, n int) registry.Agent {
		a := registry.Agent{Name: name}
		for i := range n {
			m := fmt.Sprint("m", i)
			a.DataMethods = append(a.DataMethods, m)
			a.Methods = append(a.Methods, registry.Method{Name: m, InputSchema: json.RawMessage(sumSchema)})
		}
		return a
	}
	quiet := sumAgent(sumSchema)
	c.check(log, quiet, "sum", nil)
	first := c.m["Calc"]["Sum"].lazy
	for i := range 40 { // 40 agents of 256 methods: 2.5 times the bound
		a := many(fmt.Sprint("Busy", i), 256)
		for _, m := range a.DataMethods {
			c.check(log, a, m, nil)
			require.LessOrEqual(t, c.n, maxCompiledParams)
		}
	}
	n := 0
	for _, ms := range c.m {
		n += len(ms)
	}
	assert.Equal(t, n, c.n)
	assert.Same(t, first, c.m["Calc"]["Sum"].lazy, "the quiet agent's schema is kept")
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
