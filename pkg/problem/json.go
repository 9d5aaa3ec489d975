package problem

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
)

// JSONDetail describes why a JSON document could not be decoded, in words safe to show a client:
// where the syntax broke, or which field has the wrong kind of value, never a Go type name.
func JSONDetail(err error) string {
	var syntax *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	switch {
	case err == nil:
		return "more than one JSON value"
	case errors.As(err, &syntax):
		return fmt.Sprintf("syntax error at byte %d", syntax.Offset)
	case errors.As(err, &typeErr) && typeErr.Field == "":
		return "must be a JSON " + jsonKind(typeErr.Type)
	case errors.As(err, &typeErr):
		return fmt.Sprintf("field %s must be a JSON %s", typeErr.Field, jsonKind(typeErr.Type))
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "the JSON ends too early"
	default:
		return "not valid JSON"
	}
}

// jsonKind names the JSON kind of value a Go type decodes from.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "value"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		return "object"
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return "string"
		}
		return "array"
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "whole number"
	case reflect.Float32, reflect.Float64:
		return "number"
	default:
		return "value"
	}
}
