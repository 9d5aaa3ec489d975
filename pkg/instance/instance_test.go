package instance_test

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/instance"
	"github.com/agentbus/agentbus/pkg/natstest"
)

func setup(t *testing.T) (context.Context, *instance.Store) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	res := natstest.Bus(t, bus.Config{})
	return ctx, instance.NewStore(res.Instances)
}

func newRecord(tenant, wf string) instance.Record {
	now := time.Now().UTC().Truncate(time.Millisecond)
	return instance.Record{
		Tenant: tenant, WorkflowID: wf, RunID: "run-1", Status: instance.Running,
		StartedAt: now, LastActiveAt: now, Events: 1,
		State: json.RawMessage(`{"count":1}`),
	}
}

func TestPutCreatesAndConflicts(t *testing.T) {
	ctx, s := setup(t)
	const wf = "acme:Echo:Supervisor Workflow:default"
	r, err := s.Put(ctx, newRecord("acme", wf))
	require.NoError(t, err, "create")
	require.NotZero(t, r.Revision, "created record has revision 0")
	// A second starter that also saw no record loses.
	_, err = s.Put(ctx, newRecord("acme", wf))
	require.ErrorIs(t, err, instance.ErrConflict, "second create")

	// An update at the current revision wins and moves the revision on.
	r.Events = 2
	r2, err := s.Put(ctx, r)
	require.NoError(t, err, "update")
	assert.Greater(t, r2.Revision, r.Revision, "revision after update")
	// An update from the stale read loses and leaves the record alone.
	r.Events = 99
	_, err = s.Put(ctx, r)
	require.ErrorIs(t, err, instance.ErrConflict, "stale update")
	got, err := s.Get(ctx, "acme", wf)
	require.NoError(t, err)
	assert.EqualValues(t, 2, got.Events, "events after the stale update")
	assert.Equal(t, r2.Revision, got.Revision, "revision after the stale update")
}

func TestUpdateOfMissingRecordConflicts(t *testing.T) {
	ctx, s := setup(t)
	r := newRecord("acme", "acme:Echo:Conversational:gone")
	r.Revision = 42
	_, err := s.Put(ctx, r)
	assert.ErrorIs(t, err, instance.ErrConflict, "update of a missing record")
}

func TestGetMissing(t *testing.T) {
	ctx, s := setup(t)
	_, err := s.Put(ctx, newRecord("acme", "acme:Echo:Conversational:a"))
	require.NoError(t, err)
	tests := []struct {
		name   string
		tenant string
		wf     string
	}{
		{name: "other workflow", tenant: "acme", wf: "acme:Echo:Conversational:b"},
		{name: "same workflow id, other tenant", tenant: "other", wf: "acme:Echo:Conversational:a"},
		{name: "never written tenant", tenant: "nobody", wf: "x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.Get(ctx, tt.tenant, tt.wf)
			assert.ErrorIs(t, err, instance.ErrNotFound, "Get(%q, %q)", tt.tenant, tt.wf)
		})
	}
}

func TestRoundTrip(t *testing.T) {
	ctx, s := setup(t)
	done := time.Date(2025, 3, 4, 5, 6, 7, 890_000_000, time.UTC)
	tests := []struct {
		name  string
		wf    string
		state json.RawMessage
		done  *time.Time
	}{
		{name: "object state", wf: "acme:Echo:Supervisor Workflow:default", state: json.RawMessage(`{"count":3,"names":["a","b"],"nested":{"x":null}}`)},
		{name: "no state", wf: "acme:Echo:Conversational:empty", state: nil},
		{name: "array state", wf: "acme:Echo:Conversational:arr", state: json.RawMessage(`[1,2.5,"three",true]`)},
		{name: "string state with unicode and html", wf: "acme:Echo:Conversational:str", state: json.RawMessage(`"héllo <b>&</b> 🙂"`)},
		{name: "completed", wf: "acme:Echo:Conversational:done", state: json.RawMessage(`{}`), done: &done},
		{name: "id with dots spaces wildcards", wf: "acme:a.b c:*:>", state: json.RawMessage(`{"k":"v"}`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := newRecord("acme", tt.wf)
			in.State = tt.state
			in.CompletedAt = tt.done
			if tt.done != nil {
				in.Status = instance.Completed
			}
			in.Events = 1000
			put, err := s.Put(ctx, in)
			require.NoError(t, err)
			got, err := s.Get(ctx, "acme", tt.wf)
			require.NoError(t, err)
			assert.Equal(t, put.Revision, got.Revision, "Get revision, Put returned %d", put.Revision)
			assert.Equal(t, in.Tenant, got.Tenant, "Get = %+v, want %+v", got, in)
			assert.Equal(t, in.WorkflowID, got.WorkflowID, "Get = %+v, want %+v", got, in)
			assert.Equal(t, in.RunID, got.RunID, "Get = %+v, want %+v", got, in)
			assert.Equal(t, in.Status, got.Status, "Get = %+v, want %+v", got, in)
			assert.Equal(t, in.Events, got.Events, "Get = %+v, want %+v", got, in)
			assert.True(t, got.StartedAt.Equal(in.StartedAt), "Get = %+v, want %+v", got, in)
			assert.True(t, got.LastActiveAt.Equal(in.LastActiveAt), "Get = %+v, want %+v", got, in)
			if in.CompletedAt == nil {
				assert.Nil(t, got.CompletedAt, "CompletedAt, want none")
			} else if assert.NotNil(t, got.CompletedAt, "CompletedAt, want %v", in.CompletedAt) {
				assert.True(t, got.CompletedAt.Equal(*in.CompletedAt), "CompletedAt = %v, want %v", got.CompletedAt, in.CompletedAt)
			}
			assertState(t, in.State, got.State)
		})
	}
}

// assertState compares two JSON documents by value; nil and empty both mean no state.
func assertState(t *testing.T, want, got json.RawMessage) {
	t.Helper()
	if len(bytes.TrimSpace(want)) == 0 {
		assert.Empty(t, bytes.TrimSpace(got), "State = %s, want none", got)
		return
	}
	assert.JSONEq(t, string(want), string(got), "State")
}

func TestRecordJSONOmitsRevision(t *testing.T) {
	r := newRecord("acme", "wf")
	r.Revision = 7
	b, err := json.Marshal(r)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	for _, k := range []string{"revision", "Revision"} {
		assert.NotContains(t, m, k, "stored JSON %s has %q", b, k)
	}
	for _, k := range []string{"tenant", "workflowId", "runId", "status", "startedAt", "lastActiveAt", "events", "state"} {
		assert.Contains(t, m, k, "stored JSON %s lacks %q", b, k)
	}
}

func TestPutInvalidState(t *testing.T) {
	ctx, s := setup(t)
	r := newRecord("acme", "acme:Echo:Conversational:bad")
	r.State = json.RawMessage(`{not json`)
	_, err := s.Put(ctx, r)
	assert.Error(t, err, "Put with invalid state JSON, want an encoding error")
	assert.NotErrorIs(t, err, instance.ErrConflict, "Put with invalid state JSON, want an encoding error")
	_, err = s.Get(ctx, "acme", r.WorkflowID)
	assert.ErrorIs(t, err, instance.ErrNotFound, "record with invalid state was stored: Get")
}

func TestConcurrentStartersOneWins(t *testing.T) {
	ctx, s := setup(t)
	const starters = 8
	var wg sync.WaitGroup
	errs := make([]error, starters)
	for i := range starters {
		wg.Go(func() {
			_, errs[i] = s.Put(ctx, newRecord("acme", "acme:Echo:Conversational:race"))
		})
	}
	wg.Wait()
	var won, lost int
	for _, err := range errs {
		if err == nil {
			won++
		} else if assert.ErrorIs(t, err, instance.ErrConflict, "unexpected error") {
			lost++
		}
	}
	assert.Equal(t, 1, won, "starters that won")
	assert.Equal(t, starters-1, lost, "starters that lost")
}
