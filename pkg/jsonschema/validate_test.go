package jsonschema_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/jsonschema"
)

// echoSum is the schema Method derives for Echo's sum.
func echoSum(t testing.TB) json.RawMessage {
	t.Helper()
	type in struct {
		Values []float64 `json:"values" jsonschema:"the numbers to add"`
	}
	schema, err := jsonschema.JSON(reflect.TypeFor[in]())
	require.NoError(t, err)
	return schema
}

func TestValidate(t *testing.T) {
	nested := json.RawMessage(`{"type":"object","properties":{"inner":{"type":"object","properties":{"n":{"type":"integer","minimum":1}},"required":["n"]},"tags":{"type":"array","items":{"type":"string","pattern":"^[a-z]+$"}}},"additionalProperties":false}`)
	for _, tc := range []struct {
		name   string
		schema json.RawMessage
		params string
		want   string // "" valid; else the error
	}{
		{"required field left out", echoSum(t), `{}`, `missing property 'values'`},
		{"no parameters are {}", echoSum(t), ``, `missing property 'values'`},
		{"null parameters are {}", echoSum(t), `null`, `missing property 'values'`},
		{"wrong type", echoSum(t), `{"values":"x"}`, `at /values: got string, want array`},
		{"wrong item", echoSum(t), `{"values":[1,"a"]}`, `at /values/1: got string, want number`},
		{"valid", echoSum(t), `{"values":[1,2.5]}`, ``},
		{"extra properties are allowed unless the schema says", echoSum(t), `{"values":[],"x":1}`, ``},
		{"nested required", nested, `{"inner":{}}`, `at /inner: missing property 'n'`},
		{"integer as 1.0", nested, `{"inner":{"n":1.0}}`, ``},
		{"minimum", nested, `{"inner":{"n":0}}`, `at /inner/n: minimum: got 0, want 1`},
		{"numbers as JSON writes them", json.RawMessage(`{"type":"object","properties":{"n":{"maximum":1000.5}}}`), `{"n":12345}`, `at /n: maximum: got 12345, want 1000.5`},
		{"pattern", nested, `{"tags":["ok","Not"]}`, `at /tags/1: 'Not' does not match pattern '^[a-z]+$'`},
		{"additional property", nested, `{"other":1}`, `additional properties 'other' not allowed`},
		{"a key with a slash", nested, `{"a/b":1}`, `additional properties 'a/b' not allowed`},
		{"several failures, in the order of their places", nested, `{"tags":[1,"a",2,3,4,5,6,7,8,9,10,"x",12],"inner":{"n":0}}`,
			`at /inner/n: minimum: got 0, want 1; at /tags/0: got number, want string; at /tags/2: got number, want string; at /tags/3: got number, want string; at /tags/4: got number, want string; and 7 more`},
		{"additional properties in name order", nested, `{"z":1,"b":2,"m":3}`, `additional properties 'b', 'm', 'z' not allowed`},
		{"not JSON", echoSum(t), `{"values":`, `the parameters are not JSON`},
		{"a schema of another type takes no parameters", json.RawMessage(`{"type":"integer"}`), ``, ``},
		{"and checks those it gets", json.RawMessage(`{"type":"integer"}`), `{}`, `got object, want integer`},
		{"draft 7", json.RawMessage(`{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","required":["a"]}`), `{}`, `missing property 'a'`},
		{"$ref within the schema", json.RawMessage(`{"type":"object","properties":{"p":{"$ref":"#/$defs/pos"}},"$defs":{"pos":{"type":"integer","exclusiveMinimum":0}}}`), `{"p":-1}`, `at /p: exclusiveMinimum: got -1, want 0`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := jsonschema.Compile(tc.schema)
			require.NoError(t, err)
			require.NotNil(t, v)
			err = v.Validate([]byte(tc.params))
			if tc.want == "" {
				assert.NoError(t, err)
				return
			}
			var ve *jsonschema.ValidationError
			require.True(t, errors.As(err, &ve), "error %T %v", err, err)
			assert.Equal(t, tc.want, err.Error())
		})
	}
}

// A schema that constrains nothing but being an object compiles to nil, which accepts
// everything: such methods cost nothing to call.
func TestCompileNothingToCheck(t *testing.T) {
	for _, s := range []string{`{}`, `{"type":"object"}`, `{"type":"object","description":"any","title":"t","$schema":"https://json-schema.org/draft/2020-12/schema"}`} {
		v, err := jsonschema.Compile(json.RawMessage(s))
		require.NoError(t, err, s)
		assert.Nil(t, v, s)
		assert.NoError(t, v.Validate([]byte(`{"anything":[1]}`)), "a nil Validator accepts everything")
	}
	v, err := jsonschema.Compile(json.RawMessage(`{"type":"object","properties":{"a":{"type":"string"}}}`))
	require.NoError(t, err)
	assert.NotNil(t, v, "properties constrain")
}

// A schema that is not one, or that needs anything from outside itself, does not compile.
func TestCompileRefuses(t *testing.T) {
	for _, tc := range []struct{ name, schema, want string }{
		{"not JSON", `{"type":`, "the schema is not JSON"},
		{"unknown type", `{"type":"foo"}`, "the schema is not a valid JSON Schema: at /type: value must be one of"},
		{"a pattern Go cannot match", `{"properties":{"a":{"pattern":"(?!x)"}}}`, "is not valid regex"},
		{"a file", `{"$ref":"file:///etc/passwd"}`, "schemas are not loaded from anywhere"},
		{"a URL", `{"$ref":"https://example.com/schema.json"}`, "schemas are not loaded from anywhere"},
		{"an unknown $schema", `{"$schema":"https://example.com/meta","type":"object"}`, "schemas are not loaded from anywhere"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := jsonschema.Compile(json.RawMessage(tc.schema))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.NotContains(t, err.Error(), "\n")
		})
	}
}

// The patterns of a schema are bounded together, before any is compiled: a schema of many
// patterns that each repeat a thousand times compiled to more than 150 MB.
func TestCompileBoundsPatterns(t *testing.T) {
	props := func(n int, prop string) string {
		var b strings.Builder
		for i := range n {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, `"p%d":%s`, i, prop)
		}
		return `{"type":"object","properties":{` + b.String() + `}}`
	}
	patternProps := `"^.{1,1000}$":{}`
	for n := 999; n > 950; n-- {
		patternProps += fmt.Sprintf(`,"^.{1,%d}$":{}`, n)
	}
	for _, tc := range []struct{ name, schema string }{
		{"many repeated patterns", props(50, `{"type":"string","pattern":"^.{1,1000}$"}`)},
		{"one pattern", `{"properties":{"a":{"pattern":"^(?:` + strings.Repeat("abcdefghij", 12) + `){1000}$"}}}`},
		{"nested repetitions", `{"properties":{"a":{"pattern":"^` + strings.Repeat(`(?:(?:abcdefghij){1,10}){1,100}`, 10) + `$"}}}`},
		{"pattern properties", `{"patternProperties":{` + patternProps + `}}`},
		{"deep inside", `{"$defs":{"a":{"items":[{"anyOf":[` + strings.Repeat(`{"pattern":"^[0-9]{1000}$"},`, 100) + `{}]}]}}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := jsonschema.Compile(json.RawMessage(tc.schema))
			require.Error(t, err)
			assert.Contains(t, err.Error(), "the schema's patterns are too large")
		})
	}

	// Patterns as schemas have them, many of them, compile; so does a property named pattern.
	usual := props(300, `{"type":"string","pattern":"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"}`)
	_, err := jsonschema.Compile(json.RawMessage(usual))
	require.NoError(t, err)
	v, err := jsonschema.Compile(json.RawMessage(`{"type":"object","properties":{"pattern":{"type":"string","pattern":"^.{1,1000}$"}}}`))
	require.NoError(t, err)
	assert.NoError(t, v.Validate([]byte(`{"pattern":"x"}`)))

	// A value checked against "format": "regex" (draft 7) is held to the same bound.
	v, err = jsonschema.Compile(json.RawMessage(`{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"re":{"type":"string","format":"regex"}}}`))
	require.NoError(t, err)
	assert.NoError(t, v.Validate([]byte(`{"re":"^[a-z]{2,8}$"}`)))
	assert.NoError(t, v.Validate([]byte(`{"re":"(?:`+strings.Repeat("abcdefghij", 5)+`){1000}"}`)), "about 51,000 steps")
	assert.Error(t, v.Validate([]byte(`{"re":"(?:`+strings.Repeat("abcdefghij", 11)+`){1000}"}`)), "about 111,000 steps")
}

// What a failure quotes of the caller's parameters is bounded and printable, and so is the
// number of failures listed.
func TestValidationErrorBounded(t *testing.T) {
	v, err := jsonschema.Compile(json.RawMessage(`{"type":"object","properties":{"s":{"type":"string","pattern":"^a$"},"n":{"type":"array","items":{"type":"integer"}}}}`))
	require.NoError(t, err)
	long := strings.Repeat("\u00e9", 1000) + "\x01"
	b, _ := json.Marshal(map[string]any{"s": long})
	err = v.Validate(b)
	require.Error(t, err)
	assert.Less(t, len(err.Error()), 300)
	assert.NotContains(t, err.Error(), "\x01")
	assert.True(t, strings.HasSuffix(err.Error(), "…"))

	err = v.Validate([]byte(`{"n":["a","b","c","d","e","f","g"]}`))
	var ve *jsonschema.ValidationError
	require.True(t, errors.As(err, &ve))
	assert.Len(t, ve.Causes, jsonschema.MaxCauses)
	assert.Equal(t, 2, ve.More)
	assert.True(t, strings.HasSuffix(err.Error(), "; and 2 more"), err.Error())
}

// BenchmarkValidate is the cost a call of Echo's sum pays for its parameters' check, once where
// it is accepted (ingress) and once where it runs (host).
func BenchmarkValidate(b *testing.B) {
	v, err := jsonschema.Compile(echoSum(b))
	require.NoError(b, err)
	params := []byte(`{"values":[1,2,3.5]}`)
	b.ReportAllocs()
	for b.Loop() {
		if err := v.Validate(params); err != nil {
			b.Fatal(err)
		}
	}
}

// Size follows the schema and its patterns, within a few times of what the compiled form holds.
func TestSize(t *testing.T) {
	var none *jsonschema.Validator
	assert.Zero(t, none.Size())
	small, err := jsonschema.Compile(json.RawMessage(`{"type":"object","properties":{"a":{"type":"string"}}}`))
	require.NoError(t, err)
	patterned, err := jsonschema.Compile(json.RawMessage(`{"type":"object","properties":{"a":{"type":"string","pattern":"^.{1,1000}$"}}}`))
	require.NoError(t, err)
	assert.Greater(t, small.Size(), 1000)
	assert.Less(t, small.Size(), 10_000)
	assert.Greater(t, patterned.Size(), 2000*40, "a step of a pattern holds some 45 bytes")
	assert.Less(t, patterned.Size(), 2200*60)

	// Estimate says the same without compiling.
	assert.Equal(t, patterned.Size(), jsonschema.Estimate(json.RawMessage(`{"type":"object","properties":{"a":{"type":"string","pattern":"^.{1,1000}$"}}}`)))
	assert.Zero(t, jsonschema.Estimate(json.RawMessage(`{"type":`)))
}
