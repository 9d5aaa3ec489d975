package agent

import (
	"encoding/json"
	"net/http"
)

// Response is a handler's answer to a webhook call: the HTTP caller receives its status code,
// content and content type.
type Response struct {
	StatusCode int
	Content    []byte
	// ContentType defaults to application/json when empty.
	ContentType string

	// platformError is set on replies the platform makes for a handler (unknown method, dead
	// letter).
	platformError string
	// retry is set by Retry: the call failed and is to be run again.
	retry error
}

// DefaultContentType is the content type of a Response that names none.
const DefaultContentType = "application/json"

// Status is a response with a status code and no content.
func Status(code int) Response { return Response{StatusCode: code} }

// Text is a text/plain response.
func Text(code int, s string) Response {
	return Response{StatusCode: code, Content: []byte(s), ContentType: "text/plain; charset=utf-8"}
}

// JSON is a response holding v encoded as JSON. If v cannot be encoded the response is a 500
// naming no internals.
func JSON(code int, v any) Response {
	b, err := json.Marshal(v)
	if err != nil {
		return Response{StatusCode: http.StatusInternalServerError, Content: []byte(`{"error":"response could not be encoded"}`), ContentType: DefaultContentType}
	}
	return Response{StatusCode: code, Content: b, ContentType: DefaultContentType}
}

// Bytes is a response with the given content and content type.
func Bytes(code int, contentType string, content []byte) Response {
	return Response{StatusCode: code, Content: content, ContentType: contentType}
}

func (r Response) normalized() Response {
	if r.StatusCode == 0 {
		r.StatusCode = http.StatusOK
	}
	if r.ContentType == "" {
		r.ContentType = DefaultContentType
	}
	return r
}
