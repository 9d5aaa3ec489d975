package agent

import (
	"bytes"
	"errors"
	"log/slog"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/agentbus/agentbus/pkg/problem"
)

// A webhook handler's Fail: the cause is logged, the caller gets the status and message an
// *Error chooses, or a 500 naming no internals; a retryable cause is a Retry.
func TestFailAnswersAndLogsItsCause(t *testing.T) {
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug}))

	got := Fail(errors.New("dialing db-7.internal:5432: refused")).answer(log, "m")
	assert.Equal(t, http.StatusInternalServerError, got.StatusCode)
	assert.Equal(t, "the handler failed", string(got.Content))
	assert.Equal(t, problem.HandlerError.Slug, got.platformError)
	assert.Contains(t, logged.String(), "level=ERROR")
	assert.Contains(t, logged.String(), "db-7.internal", "the cause is logged")

	logged.Reset()
	got = Fail(&Error{Status: http.StatusUnprocessableEntity, Message: "unknown order 41", Err: errors.New("no row 41 in orders")}).answer(log, "m")
	assert.Equal(t, http.StatusUnprocessableEntity, got.StatusCode)
	assert.Equal(t, "unknown order 41", string(got.Content))
	assert.Contains(t, logged.String(), "no row 41 in orders")
	assert.Contains(t, logged.String(), "level=DEBUG", "a 4xx is the caller's mistake")

	got = Fail(Errorf(99, "odd")).answer(log, "m")
	assert.Equal(t, http.StatusInternalServerError, got.StatusCode, "a status outside 400–599 is a 500")

	r := Fail(Retryable(errors.New("upstream busy")))
	assert.Error(t, r.retry, "a retryable cause is a Retry")
	assert.NoError(t, r.fail)
	assert.Error(t, Fail(nil).fail, "Fail(nil) still fails")

	ok := JSON(http.StatusOK, map[string]int{"n": 1}).answer(log, "m")
	assert.Equal(t, http.StatusOK, ok.StatusCode)
	assert.Empty(t, ok.platformError)
}
