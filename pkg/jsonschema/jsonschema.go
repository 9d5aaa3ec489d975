// Package jsonschema derives a JSON Schema (draft 2020-12) from a Go type, the schema of the JSON
// that encoding/json decodes into that type, and checks Data methods' parameters against their
// schemas. Agents use the derived schemas to describe their typed Data methods' parameters to a
// language model (as tools) and, through the registry, to other clients; hosts and the ingress
// check every call's parameters against the method's schema before its handler runs (Compile,
// Validator; a Cache compiles each schema when first used and keeps them within a budget).
//
// The rules follow encoding/json: a struct is an object whose properties are its exported fields,
// named by their json tags ("-" skips a field, embedded structs are inlined); a field is required
// unless its tag says omitempty or omitzero or it is a pointer; slices and arrays are arrays
// ([]byte is a base64 string); maps are objects whose values match additionalProperties;
// time.Time and timefmt.Time are date-time strings; json.RawMessage, interfaces and types with
// their own UnmarshalJSON accept any value; types with UnmarshalText are strings. A field's
// `jsonschema:"…"` tag becomes its description. A struct type that contains itself is not
// expanded a second time: the inner occurrence accepts any value.
//
// A derived schema covers only what a Go type can say: no enums, patterns or ranges. When those
// matter, write the schema by hand; Compile takes any schema. The package does not validate
// documents other than parameters, nor generate Go types from schemas.
package jsonschema

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/agentbus/agentbus/pkg/timefmt"
)

// Schema is a JSON Schema of the subset this package writes. Its JSON form lists properties in
// the struct's field order.
type Schema struct {
	Type            string
	Format          string
	ContentEncoding string
	Description     string
	Properties      []Property
	Required        []string
	Items           *Schema
	MinItems        *int
	MaxItems        *int
	// AdditionalProperties is the schema of an object's values not named in Properties; nil
	// allows any.
	AdditionalProperties *Schema
}

// Property is one named property of an object schema.
type Property struct {
	Name   string
	Schema *Schema
}

// MarshalJSON writes the schema with its properties in order. An empty schema is {}: any value.
func (s *Schema) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	field := func(name string, v any) error {
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		b.WriteString(`"` + name + `":`)
		enc, err := json.Marshal(v)
		b.Write(enc)
		return err
	}
	var errs []error
	add := func(name string, v any, set bool) {
		if set {
			errs = append(errs, field(name, v))
		}
	}
	add("type", s.Type, s.Type != "")
	add("format", s.Format, s.Format != "")
	add("contentEncoding", s.ContentEncoding, s.ContentEncoding != "")
	add("description", s.Description, s.Description != "")
	if len(s.Properties) > 0 {
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		b.WriteString(`"properties":{`)
		for i, p := range s.Properties {
			if i > 0 {
				b.WriteByte(',')
			}
			name, _ := json.Marshal(p.Name)
			b.Write(name)
			b.WriteByte(':')
			v, err := p.Schema.MarshalJSON()
			errs = append(errs, err)
			b.Write(v)
		}
		b.WriteByte('}')
	}
	add("required", s.Required, len(s.Required) > 0)
	add("items", s.Items, s.Items != nil)
	add("minItems", s.MinItems, s.MinItems != nil)
	add("maxItems", s.MaxItems, s.MaxItems != nil)
	add("additionalProperties", s.AdditionalProperties, s.AdditionalProperties != nil)
	b.WriteByte('}')
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// ErrUnsupported is wrapped by For's error for a type encoding/json cannot decode into:
// channels, functions, complex numbers, unsafe pointers, maps with other than string or integer
// keys.
var ErrUnsupported = errors.New("jsonschema: type cannot be decoded from JSON")

// For returns the schema of t.
func For(t reflect.Type) (*Schema, error) {
	d := deriver{onStack: make(map[reflect.Type]bool)}
	return d.schema(t, "")
}

// Of returns the schema of T.
func Of[T any]() (*Schema, error) { return For(reflect.TypeFor[T]()) }

// JSON returns the schema of t as JSON.
func JSON(t reflect.Type) (json.RawMessage, error) {
	s, err := For(t)
	if err != nil {
		return nil, err
	}
	return json.Marshal(s)
}

var (
	timeType        = reflect.TypeFor[time.Time]()
	timefmtType     = reflect.TypeFor[timefmt.Time]()
	rawMessageType  = reflect.TypeFor[json.RawMessage]()
	numberType      = reflect.TypeFor[json.Number]()
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

type deriver struct {
	// onStack holds the struct types being expanded, so that a type that contains itself ends.
	onStack map[reflect.Type]bool
}

// schema derives t's schema; path names where t was met, for errors.
func (d deriver) schema(t reflect.Type, path string) (*Schema, error) {
	switch t {
	case timeType, timefmtType:
		return &Schema{Type: "string", Format: "date-time"}, nil
	case rawMessageType:
		return &Schema{}, nil
	case numberType:
		return &Schema{Type: "number"}, nil
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	// Types that decode themselves: JSON ones take anything, text ones a string.
	pt := reflect.PointerTo(t)
	if t.Implements(jsonUnmarshaler) || pt.Implements(jsonUnmarshaler) {
		if t == timeType || t == timefmtType {
			return &Schema{Type: "string", Format: "date-time"}, nil
		}
		return &Schema{}, nil
	}
	if t.Implements(textUnmarshaler) || pt.Implements(textUnmarshaler) {
		return &Schema{Type: "string"}, nil
	}
	switch t.Kind() {
	case reflect.Bool:
		return &Schema{Type: "boolean"}, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return &Schema{Type: "integer"}, nil
	case reflect.Float32, reflect.Float64:
		return &Schema{Type: "number"}, nil
	case reflect.String:
		return &Schema{Type: "string"}, nil
	case reflect.Interface:
		return &Schema{}, nil
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 && !reflect.PointerTo(t.Elem()).Implements(textUnmarshaler) {
			return &Schema{Type: "string", ContentEncoding: "base64"}, nil
		}
		items, err := d.schema(t.Elem(), path+"[]")
		if err != nil {
			return nil, err
		}
		return &Schema{Type: "array", Items: items}, nil
	case reflect.Array:
		items, err := d.schema(t.Elem(), path+"[]")
		if err != nil {
			return nil, err
		}
		n := t.Len()
		return &Schema{Type: "array", Items: items, MinItems: &n, MaxItems: &n}, nil
	case reflect.Map:
		if !mapKeyOK(t.Key()) {
			return nil, fmt.Errorf("%w: %s has map key type %s", ErrUnsupported, where(path), t.Key())
		}
		values, err := d.schema(t.Elem(), path+"{}")
		if err != nil {
			return nil, err
		}
		s := &Schema{Type: "object"}
		if !values.any() {
			s.AdditionalProperties = values
		}
		return s, nil
	case reflect.Struct:
		return d.object(t, path)
	default:
		return nil, fmt.Errorf("%w: %s is a %s", ErrUnsupported, where(path), t.Kind())
	}
}

// any reports whether s accepts every value.
func (s *Schema) any() bool {
	return s.Type == "" && s.Format == "" && s.ContentEncoding == "" && len(s.Properties) == 0 &&
		s.Items == nil && s.AdditionalProperties == nil && len(s.Required) == 0
}

func where(path string) string {
	if path == "" {
		return "the type"
	}
	return "field " + strings.TrimPrefix(path, ".")
}

func mapKeyOK(k reflect.Type) bool {
	switch k.Kind() {
	case reflect.String, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return true
	}
	return reflect.PointerTo(k).Implements(textUnmarshaler)
}

// object derives a struct's schema.
func (d deriver) object(t reflect.Type, path string) (*Schema, error) {
	if d.onStack[t] {
		return &Schema{}, nil
	}
	d.onStack[t] = true
	defer delete(d.onStack, t)
	s := &Schema{Type: "object"}
	seen := make(map[string]bool)
	if err := d.fields(t, path, s, seen); err != nil {
		return nil, err
	}
	return s, nil
}

// fields adds t's fields to s. Fields of embedded structs come after the outer struct's own, and
// lose to them on a name clash, as encoding/json's dominance rule has it for the common case.
func (d deriver) fields(t reflect.Type, path string, s *Schema, seen map[string]bool) error {
	var embedded []reflect.Type
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		ft := f.Type
		if f.Anonymous && name == "" {
			et := ft
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				embedded = append(embedded, et)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if seen[name] {
			continue
		}
		seen[name] = true
		fs, err := d.schema(ft, path+"."+name)
		if err != nil {
			return err
		}
		if hasOpt(opts, "string") && fs.Type != "" && fs.Type != "object" && fs.Type != "array" {
			fs = &Schema{Type: "string"}
		}
		if desc := f.Tag.Get("jsonschema"); desc != "" {
			fs = withDescription(fs, desc)
		}
		s.Properties = append(s.Properties, Property{Name: name, Schema: fs})
		if !hasOpt(opts, "omitempty") && !hasOpt(opts, "omitzero") && ft.Kind() != reflect.Pointer {
			s.Required = append(s.Required, name)
		}
	}
	for _, et := range embedded {
		if d.onStack[et] {
			continue
		}
		d.onStack[et] = true
		err := d.fields(et, path, s, seen)
		delete(d.onStack, et)
		if err != nil {
			return err
		}
	}
	return nil
}

// withDescription returns a copy of s described by desc.
func withDescription(s *Schema, desc string) *Schema {
	c := *s
	c.Description = desc
	return &c
}

func hasOpt(opts, name string) bool {
	for opts != "" {
		var o string
		o, opts, _ = strings.Cut(opts, ",")
		if o == name {
			return true
		}
	}
	return false
}

// ToolParameters returns schema as the parameters of a tool a language model may call. OpenAI's
// function calling and MCP's inputSchema both take only a schema of a JSON object, so: a schema
// of type "object" is returned as it is; a schema without a type (such as {}, any value, which
// json.RawMessage and interfaces get) with "type":"object" added, since objects are among the
// values it accepts; and any other schema (a number, a string, an array, a list of types), which
// no arguments object matches, reports false.
func ToolParameters(schema json.RawMessage) (json.RawMessage, bool) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(schema, &obj); err != nil || obj == nil {
		return nil, false
	}
	typ, typed := obj["type"]
	if !typed {
		if len(obj) == 0 {
			return json.RawMessage(`{"type":"object"}`), true
		}
		// Inserted first, so that the other keywords keep their order.
		rest := bytes.TrimSpace(bytes.TrimSpace(schema)[1:])
		return append(json.RawMessage(`{"type":"object",`), rest...), true
	}
	var name string
	if json.Unmarshal(typ, &name) != nil || name != "object" {
		return nil, false
	}
	return schema, true
}
