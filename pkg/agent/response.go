package agent

import (
	"encoding/json"
	"errors"
	"log/slog"
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
	// fail is set by Fail: the call failed for good, for this cause.
	fail error
}

// DefaultContentType is the content type of a Response that names none.
const DefaultContentType = "application/json"

// Status is a response with a status code and no content.
func Status(code int) Response { return Response{StatusCode: code} }

// Fail is a webhook handler's failure with a cause: the call is not run again, and the cause is
// logged with the call. The caller gets problem+json of type handler-error: for an *Error, with
// its status (400–599) and its message (agent.Errorf(422, "unknown order %s", id)); for any
// other error, a 500 whose detail names no internals. A Retryable err is Retry(err): the call is
// run again.
func Fail(err error) Response {
	if err == nil {
		err = errors.New("the handler failed")
	}
	if IsRetryable(err) {
		return Retry(err)
	}
	return Response{fail: err}
}

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

// answer is what the caller is sent for r, an answer of the webhook method: the answer of a
// Fail's cause (logged to log with the method), or r normalized.
func (r Response) answer(log *slog.Logger, method string) Response {
	if r.fail != nil {
		status, slug, detail := failure(log.With("method", method), r.fail)
		return Response{StatusCode: status, Content: []byte(detail), ContentType: "text/plain; charset=utf-8", platformError: slug}
	}
	return r.normalized()
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
