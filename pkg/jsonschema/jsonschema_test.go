package jsonschema_test

import (
	"encoding/json"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/jsonschema"
)

type sumIn struct {
	Values []float64 `json:"values"`
}

type options struct {
	Size   int    `json:"size,omitempty" jsonschema:"page size, default 20"`
	Scope  string `json:"scope,omitzero"`
	Strict *bool  `json:"strict"`
	hidden int    //lint:ignore U1000 an unexported field, which the schema leaves out
	Skip   string `json:"-"`
	Plain  string
	Count  int64 `json:"count,string"`
}

type Base struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

type withEmbedded struct {
	Base
	Name string   `json:"name"` // wins over Base.Name
	Tags []string `json:"tags,omitempty"`
}

type node struct {
	Value    int    `json:"value"`
	Children []node `json:"children,omitempty"`
	Parent   *node  `json:"parent,omitempty"`
}

type nested struct {
	When    time.Time                  `json:"when"`
	Raw     json.RawMessage            `json:"raw"`
	Any     any                        `json:"any"`
	Blob    []byte                     `json:"blob"`
	Addr    netip.Addr                 `json:"addr"`
	Pair    [2]int                     `json:"pair"`
	Scores  map[string]float64         `json:"scores"`
	Open    map[string]any             `json:"open"`
	ByID    map[int]sumIn              `json:"byId"`
	Matrix  [][]bool                   `json:"matrix"`
	Inner   struct{ A uint8 }          `json:"inner"`
	Num     json.Number                `json:"num"`
	Deep    map[string]map[string]bool `json:"deep"`
	Pointer *sumIn                     `json:"pointer"`
}

func TestFor(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		typ  reflect.Type
		want string
	}{
		{"bool", reflect.TypeFor[bool](), `{"type":"boolean"}`},
		{"int", reflect.TypeFor[int32](), `{"type":"integer"}`},
		{"uint", reflect.TypeFor[uint](), `{"type":"integer"}`},
		{"float", reflect.TypeFor[float32](), `{"type":"number"}`},
		{"string", reflect.TypeFor[string](), `{"type":"string"}`},
		{"pointer", reflect.TypeFor[**string](), `{"type":"string"}`},
		{"any", reflect.TypeFor[any](), `{}`},
		{"raw message", reflect.TypeFor[json.RawMessage](), `{}`},
		{"time", reflect.TypeFor[time.Time](), `{"type":"string","format":"date-time"}`},
		{"time pointer", reflect.TypeFor[*time.Time](), `{"type":"string","format":"date-time"}`},
		{"bytes", reflect.TypeFor[[]byte](), `{"type":"string","contentEncoding":"base64"}`},
		{"text unmarshaler", reflect.TypeFor[netip.Addr](), `{"type":"string"}`},
		{"slice", reflect.TypeFor[[]string](), `{"type":"array","items":{"type":"string"}}`},
		{"array", reflect.TypeFor[[3]float64](), `{"type":"array","items":{"type":"number"},"minItems":3,"maxItems":3}`},
		{"map of any", reflect.TypeFor[map[string]any](), `{"type":"object"}`},
		{"map", reflect.TypeFor[map[string]int](), `{"type":"object","additionalProperties":{"type":"integer"}}`},
		{"empty struct", reflect.TypeFor[struct{}](), `{"type":"object"}`},
		{"struct", reflect.TypeFor[sumIn](), `{"type":"object","properties":{"values":{"type":"array","items":{"type":"number"}}},"required":["values"]}`},
		{
			"tags",
			reflect.TypeFor[options](),
			`{"type":"object","properties":{"size":{"type":"integer","description":"page size, default 20"},"scope":{"type":"string"},` +
				`"strict":{"type":"boolean"},"Plain":{"type":"string"},"count":{"type":"string"}},"required":["Plain","count"]}`,
		},
		{
			"embedded",
			reflect.TypeFor[withEmbedded](),
			`{"type":"object","properties":{"name":{"type":"string"},"tags":{"type":"array","items":{"type":"string"}},"id":{"type":"string"}},"required":["name","id"]}`,
		},
		{
			"recursive",
			reflect.TypeFor[node](),
			`{"type":"object","properties":{"value":{"type":"integer"},"children":{"type":"array","items":{}},"parent":{}},"required":["value"]}`,
		},
		{
			"nested",
			reflect.TypeFor[nested](),
			`{"type":"object","properties":{` +
				`"when":{"type":"string","format":"date-time"},` +
				`"raw":{},` +
				`"any":{},` +
				`"blob":{"type":"string","contentEncoding":"base64"},` +
				`"addr":{"type":"string"},` +
				`"pair":{"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":2},` +
				`"scores":{"type":"object","additionalProperties":{"type":"number"}},` +
				`"open":{"type":"object"},` +
				`"byId":{"type":"object","additionalProperties":{"type":"object","properties":{"values":{"type":"array","items":{"type":"number"}}},"required":["values"]}},` +
				`"matrix":{"type":"array","items":{"type":"array","items":{"type":"boolean"}}},` +
				`"inner":{"type":"object","properties":{"A":{"type":"integer"}},"required":["A"]},` +
				`"num":{"type":"number"},` +
				`"deep":{"type":"object","additionalProperties":{"type":"object","additionalProperties":{"type":"boolean"}}},` +
				`"pointer":{"type":"object","properties":{"values":{"type":"array","items":{"type":"number"}}},"required":["values"]}` +
				`},"required":["when","raw","any","blob","addr","pair","scores","open","byId","matrix","inner","num","deep"]}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := jsonschema.JSON(tt.typ)
			require.NoError(t, err)
			assert.JSONEq(t, tt.want, string(got))
			assert.True(t, json.Valid(got))
		})
	}
}

// The properties keep the struct's field order, so that a model reads them as written.
func TestPropertyOrder(t *testing.T) {
	t.Parallel()
	got, err := jsonschema.JSON(reflect.TypeFor[options]())
	require.NoError(t, err)
	assert.Equal(t, `{"type":"object","properties":{"size":{"type":"integer","description":"page size, default 20"},"scope":{"type":"string"},`+
		`"strict":{"type":"boolean"},"Plain":{"type":"string"},"count":{"type":"string"}},"required":["Plain","count"]}`, string(got))
}

func TestUnsupported(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		typ  reflect.Type
		want string
	}{
		{"chan", reflect.TypeFor[chan int](), "the type is a chan"},
		{"func field", reflect.TypeFor[struct {
			F func() `json:"f"`
		}](), "field f is a func"},
		{"complex in slice", reflect.TypeFor[struct {
			C []complex64 `json:"c"`
		}](), "field c[] is a complex64"},
		{"struct map key", reflect.TypeFor[map[struct{}]int](), "map key type struct {}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := jsonschema.For(tt.typ)
			require.ErrorIs(t, err, jsonschema.ErrUnsupported)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestOf(t *testing.T) {
	t.Parallel()
	s, err := jsonschema.Of[sumIn]()
	require.NoError(t, err)
	assert.Equal(t, "object", s.Type)
	require.Len(t, s.Properties, 1)
	assert.Equal(t, "values", s.Properties[0].Name)
	assert.Equal(t, []string{"values"}, s.Required)
}

func TestToolParameters(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, schema string
		want         string // "" when not offered
	}{
		{"object", `{"type":"object","properties":{"b":{"type":"integer"},"a":{"type":"string"}}}`,
			`{"type":"object","properties":{"b":{"type":"integer"},"a":{"type":"string"}}}`},
		{"any value", `{}`, `{"type":"object"}`},
		{"any value, spaced", ` { } `, `{"type":"object"}`},
		{"no type, other keywords kept in order", `{ "description":"free form", "minProperties":1}`,
			`{"type":"object","description":"free form", "minProperties":1}`},
		{"integer", `{"type":"integer"}`, ""},
		{"array", `{"type":"array","items":{"type":"integer"}}`, ""},
		{"string", `{"type":"string"}`, ""},
		{"list of types", `{"type":["object","null"]}`, ""},
		{"not an object", `[1]`, ""},
		{"null", `null`, ""},
		{"not JSON", `{`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := jsonschema.ToolParameters(json.RawMessage(tt.schema))
			if tt.want == "" {
				assert.False(t, ok, "%s", got)
				return
			}
			require.True(t, ok)
			assert.Equal(t, tt.want, string(got), "keywords in their order")
			assert.True(t, json.Valid(got))
		})
	}

	// What Method derives from a non-object parameter type is not offered.
	for _, typ := range []reflect.Type{reflect.TypeFor[int](), reflect.TypeFor[[]int](), reflect.TypeFor[string]()} {
		s, err := jsonschema.JSON(typ)
		require.NoError(t, err)
		_, ok := jsonschema.ToolParameters(s)
		assert.False(t, ok, "%s: %s", typ, s)
	}
}
