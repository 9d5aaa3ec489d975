package remote

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/agentbus/agentbus/pkg/jsonschema"
)

// A method's examples are its schema's "examples", JSON Schema's keyword for sample values of
// what the schema describes: here, sample parameter objects of the method. A registration's are
// checked against the schema, so that what it shows MCP clients and chat models is a call
// agentbus would take; Check sends the first as the method's parameters.

// maxExamples bounds a method's examples; the schema that holds them is bounded too (maxSchema).
const maxExamples = 16

// examplesOf returns the examples of a method's schema, nil when it gives none.
func examplesOf(schema json.RawMessage) ([]json.RawMessage, error) {
	if len(schema) == 0 {
		return nil, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(schema, &obj); err != nil {
		return nil, errors.New("the schema is not a JSON object")
	}
	raw, ok := obj["examples"]
	if !ok {
		return nil, nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil || list == nil {
		return nil, errors.New("the schema's examples are not an array of parameter objects")
	}
	if len(list) > maxExamples {
		return nil, fmt.Errorf("the schema gives %d examples, at most %d", len(list), maxExamples)
	}
	return list, nil
}

// checkExamples refuses examples that no call could send: each must be a JSON object, as every
// method's parameters are, that the schema takes (v; nil takes every object).
func checkExamples(schema json.RawMessage, v *jsonschema.Validator) error {
	list, err := examplesOf(schema)
	if err != nil {
		return err
	}
	for i, ex := range list {
		if !isObject(ex) {
			return fmt.Errorf("examples[%d] is not a JSON object, which a method's parameters are", i)
		}
		if err := v.Validate(ex); err != nil {
			return fmt.Errorf("examples[%d] does not match the schema: %v", i, err)
		}
	}
	return nil
}

func isObject(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && raw[0] == '{'
}

// checkParams are the parameters Check sends a Data method, and where they come from.
type checkParams struct {
	data json.RawMessage
	// from says where data came from, for the detail of the method's case.
	from string
	// refused is why a registration of the method would be refused; Check reports it instead
	// of calling the method.
	refused error
}

// String is how a case's detail names the parameters: `sent {"values":[2,3]} (its example)`.
func (p checkParams) String() string {
	return "sent " + shown(p.data) + " (" + p.from + ")"
}

// emptyParams are the parameters of a call that gives none.
var emptyParams = json.RawMessage("{}")

// paramsFor chooses the parameters Check sends the method m: the first of its examples; without
// examples, the smallest object its schema takes, when minimalParams can make one; else {}.
func paramsFor(m Method) checkParams {
	v, err := validMethod(m)
	if err != nil {
		return checkParams{data: emptyParams, from: "none", refused: fmt.Errorf("a registration with this method is refused: %w", err)}
	}
	examples, _ := examplesOf(m.Schema) // validMethod checked them
	switch {
	case len(examples) == 1:
		return checkParams{data: compact(examples[0]), from: "its example"}
	case len(examples) > 1:
		return checkParams{data: compact(examples[0]), from: fmt.Sprintf("the first of its %d examples", len(examples))}
	case len(m.Schema) == 0:
		return checkParams{data: emptyParams, from: "no schema, no examples"}
	}
	if made, ok := minimalParams(m.Schema); ok && v.Validate(made) == nil {
		if bytes.Equal(made, emptyParams) {
			return checkParams{data: made, from: "no examples; the schema requires no property"}
		}
		return checkParams{data: made, from: "no examples; made from the schema's required properties"}
	}
	from := "no examples, and the schema's required properties could not be given values"
	if v.Validate(emptyParams) != nil {
		from += "; {} does not match the schema, so no host would send it: give the method examples"
	}
	return checkParams{data: emptyParams, from: from}
}

// maxDepth bounds how deep minimalParams follows required objects within required objects.
const maxDepth = 8

// minimalParams makes the smallest parameters a schema may take: an object of its required
// properties, each its schema's const, default, first example or first enum value, else its
// type's zero value (a number's minimum), objects made the same way. It makes nothing (false)
// when a required property has no schema in properties or no type of JSON's; what it makes is
// not checked against the schema.
func minimalParams(schema json.RawMessage) (json.RawMessage, bool) {
	dec := json.NewDecoder(bytes.NewReader(schema))
	dec.UseNumber()
	var s map[string]any
	if err := dec.Decode(&s); err != nil {
		return nil, false
	}
	v, ok := minimalValue(s, 0)
	if _, isObj := v.(map[string]any); !ok || !isObj {
		return nil, false
	}
	b, err := json.Marshal(v)
	return b, err == nil
}

func minimalValue(s map[string]any, depth int) (any, bool) {
	if depth > maxDepth {
		return nil, false
	}
	for _, k := range []string{"const", "default"} {
		if v, ok := s[k]; ok {
			return v, true
		}
	}
	for _, k := range []string{"examples", "enum"} {
		if list, ok := s[k].([]any); ok && len(list) > 0 {
			return list[0], true
		}
	}
	typ := s["type"]
	if types, ok := typ.([]any); ok && len(types) > 0 {
		typ = types[0]
	}
	if typ == nil && (s["properties"] != nil || s["required"] != nil) {
		typ = "object"
	}
	switch typ {
	case "object":
		out := map[string]any{}
		props, _ := s["properties"].(map[string]any)
		required, _ := s["required"].([]any)
		for _, r := range required {
			name, _ := r.(string)
			prop, ok := props[name].(map[string]any)
			if !ok {
				return nil, false
			}
			if out[name], ok = minimalValue(prop, depth+1); !ok {
				return nil, false
			}
		}
		return out, true
	case "string":
		return "", true
	case "integer", "number":
		if least, ok := s["minimum"].(json.Number); ok {
			return least, true
		}
		return 0, true
	case "boolean":
		return false, true
	case "array":
		return []any{}, true
	case "null":
		return nil, true
	}
	return nil, false
}

// compact is raw without insignificant white space.
func compact(raw json.RawMessage) json.RawMessage {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return raw
	}
	return b.Bytes()
}

// maxShown bounds the parameters a case's detail quotes.
const maxShown = 200

// shown is JSON for a case's detail, cut to maxShown bytes.
func shown(raw json.RawMessage) string {
	if len(raw) <= maxShown {
		return string(raw)
	}
	cut := maxShown
	for cut > 0 && !utf8.RuneStart(raw[cut]) {
		cut--
	}
	return string(raw[:cut]) + "…"
}
