package jsonschema

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	sjs "github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// Validator checks a Data method's parameters against the JSON Schema of its parameters. Compile
// makes one per schema, once; it is safe for concurrent use. A nil *Validator accepts every
// value: Compile returns nil for a schema that constrains nothing but being an object, so that a
// method without a schema of its own costs nothing to call.
//
// The schemas are compiled and checked by github.com/santhosh-tekuri/jsonschema/v6: it passes
// the whole JSON-Schema-Test-Suite for drafts 4 to 2020-12, reports where in the value each
// failure is (a JSON Pointer), compiles a schema once into an immutable form, matches patterns
// with Go's regexp (linear time, whatever the caller sends) and loads no schema it is not given.
type Validator struct {
	schema *sjs.Schema
	// object is whether objects are among the values the schema takes (jsonschema.ToolParameters):
	// absent parameters are then checked as {}, which is what every endpoint sends for them.
	object bool
	// emptyErr is the result of checking {}, worked out once: parameters left out are common.
	emptyErr error
	// size is Size's estimate.
	size int
}

// compiledPerByte is about how many bytes of memory a compiled schema holds for each byte of
// the schema and each step of its patterns (MaxPatternSize): measured on 2026-12-07 between 4
// (a long enum) and 50 (many anyOf) for a schema's bytes, 42 to 53 for a pattern's steps.
const compiledPerByte = 48

// Estimate is about what schema would hold compiled (Validator.Size), worked out without
// compiling it, in a small part of the time Compile takes; 0 for what is not JSON.
func Estimate(schema json.RawMessage) int {
	doc, err := sjs.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return 0
	}
	return compiledPerByte * (len(schema) + schemaPatternSize(doc))
}

// Size is about how many bytes of memory v holds, from what its schema is: 48 for each byte of
// the schema and each step of its patterns. A 64 KiB schema holds at most about 8 MB (a nil
// Validator none).
func (v *Validator) Size() int {
	if v == nil {
		return 0
	}
	return v.size
}

// schemaURL names the schema being compiled; errors never show it.
const schemaURL = "urn:agentbus:parameters"

// annotations are keywords that describe a schema without constraining its values.
var annotations = map[string]bool{
	"$schema": true, "$id": true, "$comment": true, "title": true, "description": true,
	"examples": true, "default": true, "deprecated": true, "readOnly": true, "writeOnly": true,
}

// Compile compiles schema, the JSON Schema of a method's parameters: draft 2020-12 unless its
// $schema names draft 4, 6, 7 or 2019-09. Patterns are Go regular expressions (RE2 syntax, so a
// lookahead is an error), together at most MaxPatternSize; format is checked as the schema's
// draft has it (in draft 7 and earlier, not in 2019-09 and 2020-12), content keywords never.
// Nothing is loaded: a $ref to anything outside the schema is an error. The error of a schema
// that does not compile says where it is wrong.
//
// Compile returns nil and no error for a schema every object matches: {} or {"type":"object"},
// with annotations such as description at most.
func Compile(schema json.RawMessage) (*Validator, error) {
	doc, err := sjs.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return nil, errors.New("the schema is not JSON")
	}
	steps := schemaPatternSize(doc)
	if steps > MaxPatternSize {
		return nil, errPatternsTooLarge
	}
	c := sjs.NewCompiler()
	c.DefaultDraft(sjs.Draft2020)
	c.UseLoader(noLoader{})
	c.UseRegexpEngine(compilePattern)
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, fmt.Errorf("the schema cannot be read: %s", oneLine(err.Error()))
	}
	compiled, err := c.Compile(schemaURL)
	if err != nil {
		return nil, compileError(err)
	}
	if constrainsOnlyObject(doc) {
		return nil, nil
	}
	_, object := ToolParameters(schema)
	v := &Validator{schema: compiled, object: object, size: compiledPerByte * (len(schema) + steps)}
	if object {
		v.emptyErr = v.check(map[string]any{})
	}
	return v, nil
}

// constrainsOnlyObject reports whether doc, a decoded schema, takes every object: it holds
// nothing but annotations and "type":"object".
func constrainsOnlyObject(doc any) bool {
	obj, ok := doc.(map[string]any)
	if !ok {
		return false // true or false: false takes nothing, and true is not what agentbus writes
	}
	for k, v := range obj {
		switch {
		case annotations[k]:
		case k == "type" && v == "object":
		default:
			return false
		}
	}
	return true
}

// noLoader refuses to load any schema: a schema may refer only to itself.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("schemas are not loaded from anywhere; %s is not part of the schema", url)
}

// Validate checks params, a method's parameters as JSON, against the schema. Parameters left out
// (empty, or JSON null) are checked as {} when the schema takes objects, and not at all
// otherwise, since the method then gets its parameter type's zero value. The error is a
// *ValidationError.
func (v *Validator) Validate(params []byte) error {
	if v == nil {
		return nil
	}
	params = bytes.TrimSpace(params)
	if len(params) == 0 || string(params) == "null" {
		if v.object {
			return v.emptyErr
		}
		return nil
	}
	inst, err := sjs.UnmarshalJSON(bytes.NewReader(params))
	if err != nil {
		return &ValidationError{Causes: []Cause{{Reason: "the parameters are not JSON"}}}
	}
	return v.check(inst)
}

// check validates a decoded value.
func (v *Validator) check(inst any) error {
	err := v.schema.Validate(inst)
	if err == nil {
		return nil
	}
	var ve *sjs.ValidationError
	if !errors.As(err, &ve) {
		return &ValidationError{Causes: []Cause{{Reason: oneLine(err.Error())}}}
	}
	return causes(ve)
}

// ValidationError says why parameters do not match their schema: where each failure is and what
// it is, in the order of their places in the parameters.
type ValidationError struct {
	// Causes holds at most MaxCauses failures.
	Causes []Cause
	// More counts the failures left out.
	More int
}

// Cause is one failure of a value to match its schema.
type Cause struct {
	// At is a JSON Pointer (RFC 6901) to the failing value within the parameters, such as
	// "/values/1"; "" is the parameters themselves.
	At string
	// Reason is what is wrong, for example "missing property 'values'" or
	// "got string, want number".
	Reason string
}

// MaxCauses bounds the failures a ValidationError lists, and maxCauseBytes the length of each
// failure's location and reason: they quote what the caller sent, and end up in answers.
const (
	MaxCauses     = 5
	maxCauseBytes = 200
)

// Error lists the causes, as "missing property 'values'; at /values/1: got string, want number".
func (e *ValidationError) Error() string {
	var b strings.Builder
	for i, c := range e.Causes {
		if i > 0 {
			b.WriteString("; ")
		}
		if c.At != "" {
			b.WriteString("at " + c.At + ": ")
		}
		b.WriteString(c.Reason)
	}
	if e.More > 0 {
		fmt.Fprintf(&b, "; and %d more", e.More)
	}
	return b.String()
}

// printer words the validator's messages: in English, with numbers as JSON writes them (the
// POSIX variant groups no digits, where plain English would write 1234 as "1,234").
var printer = message.NewPrinter(language.MustParse("en-US-POSIX"))

// causes lists the failures of e's tree: its leaves, since the inner nodes ("allOf failed")
// only group them. The validator meets them in an order of its own (it walks Go maps), so they
// are put in the order of their places in the value, the same for every call.
func causes(e *sjs.ValidationError) *ValidationError {
	var leaves []*sjs.ValidationError
	var walk func(e *sjs.ValidationError)
	walk = func(e *sjs.ValidationError) {
		if len(e.Causes) == 0 {
			leaves = append(leaves, e)
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(e)
	slices.SortStableFunc(leaves, func(a, b *sjs.ValidationError) int {
		return compareLocations(a.InstanceLocation, b.InstanceLocation)
	})
	out := &ValidationError{}
	for i, l := range leaves {
		if i == MaxCauses {
			out.More = len(leaves) - i
			break
		}
		if ap, ok := l.ErrorKind.(*kind.AdditionalProperties); ok {
			slices.Sort(ap.Properties) // met in a map's order
		}
		out.Causes = append(out.Causes, Cause{At: bounded(pointer(l.InstanceLocation)), Reason: bounded(l.ErrorKind.LocalizedString(printer))})
	}
	return out
}

// compareLocations orders two places in a value token by token, array indexes by number.
func compareLocations(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] == b[i] {
			continue
		}
		ai, aerr := strconv.Atoi(a[i])
		bi, berr := strconv.Atoi(b[i])
		if aerr == nil && berr == nil {
			return cmp.Compare(ai, bi)
		}
		return strings.Compare(a[i], b[i])
	}
	return cmp.Compare(len(a), len(b))
}

// pointer is the JSON Pointer of a location's tokens.
func pointer(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(strings.NewReplacer("~", "~0", "/", "~1").Replace(t))
	}
	return b.String()
}

// bounded makes s safe to put in an answer or a log: control characters and invalid UTF-8
// replaced, cut to maxCauseBytes.
func bounded(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return utf8.RuneError
		}
		return r
	}, strings.ToValidUTF8(s, string(utf8.RuneError)))
	if len(s) <= maxCauseBytes {
		return s
	}
	cut := maxCauseBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// compileError says what is wrong with a schema that did not compile, on one line.
func compileError(err error) error {
	var sve *sjs.SchemaValidationError
	var ve *sjs.ValidationError
	if errors.As(err, &sve) && errors.As(sve.Err, &ve) {
		// Not valid against its metaschema: the failures name the keywords.
		return fmt.Errorf("the schema is not a valid JSON Schema: %s", causes(ve).Error())
	}
	msg := oneLine(err.Error())
	msg = strings.ReplaceAll(msg, schemaURL, "the schema")
	return fmt.Errorf("the schema cannot be compiled: %s", bounded(msg))
}

// oneLine joins a multi-line message's lines.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ")), " ")
}

// ParamsDetail words the refusal of a call of method whose parameters failed Validate with err,
// for the caller: the same words on every path that refuses such a call.
func ParamsDetail(method string, err error) string {
	return "the parameters of " + method + " do not match its schema: " + err.Error()
}
