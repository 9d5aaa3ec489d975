package instance_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

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
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if r.Revision == 0 {
		t.Fatal("created record has revision 0")
	}
	// A second starter that also saw no record loses.
	if _, err := s.Put(ctx, newRecord("acme", wf)); !errors.Is(err, instance.ErrConflict) {
		t.Fatalf("second create err = %v, want ErrConflict", err)
	}

	// An update at the current revision wins and moves the revision on.
	r.Events = 2
	r2, err := s.Put(ctx, r)
	if err != nil {
		t.Fatalf("update: %v", err)
	}
	if r2.Revision <= r.Revision {
		t.Errorf("revision after update = %d, want > %d", r2.Revision, r.Revision)
	}
	// An update from the stale read loses and leaves the record alone.
	r.Events = 99
	if _, err := s.Put(ctx, r); !errors.Is(err, instance.ErrConflict) {
		t.Fatalf("stale update err = %v, want ErrConflict", err)
	}
	got, err := s.Get(ctx, "acme", wf)
	if err != nil {
		t.Fatal(err)
	}
	if got.Events != 2 || got.Revision != r2.Revision {
		t.Errorf("after the stale update: events %d rev %d, want 2 rev %d", got.Events, got.Revision, r2.Revision)
	}
}

func TestUpdateOfMissingRecordConflicts(t *testing.T) {
	ctx, s := setup(t)
	r := newRecord("acme", "acme:Echo:Conversational:gone")
	r.Revision = 42
	if _, err := s.Put(ctx, r); !errors.Is(err, instance.ErrConflict) {
		t.Errorf("update of a missing record err = %v, want ErrConflict", err)
	}
}

func TestGetMissing(t *testing.T) {
	ctx, s := setup(t)
	if _, err := s.Put(ctx, newRecord("acme", "acme:Echo:Conversational:a")); err != nil {
		t.Fatal(err)
	}
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
			if _, err := s.Get(ctx, tt.tenant, tt.wf); !errors.Is(err, instance.ErrNotFound) {
				t.Errorf("Get(%q, %q) err = %v, want ErrNotFound", tt.tenant, tt.wf, err)
			}
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
			if err != nil {
				t.Fatal(err)
			}
			got, err := s.Get(ctx, "acme", tt.wf)
			if err != nil {
				t.Fatal(err)
			}
			if got.Revision != put.Revision {
				t.Errorf("Get revision %d, Put returned %d", got.Revision, put.Revision)
			}
			if got.Tenant != in.Tenant || got.WorkflowID != in.WorkflowID || got.RunID != in.RunID ||
				got.Status != in.Status || got.Events != in.Events ||
				!got.StartedAt.Equal(in.StartedAt) || !got.LastActiveAt.Equal(in.LastActiveAt) {
				t.Errorf("Get = %+v, want %+v", got, in)
			}
			if (got.CompletedAt == nil) != (in.CompletedAt == nil) || (in.CompletedAt != nil && !got.CompletedAt.Equal(*in.CompletedAt)) {
				t.Errorf("CompletedAt = %v, want %v", got.CompletedAt, in.CompletedAt)
			}
			if !jsonEqual(t, got.State, in.State) {
				t.Errorf("State = %s, want %s", got.State, in.State)
			}
		})
	}
}

// jsonEqual compares two JSON documents by value; nil and empty both mean no state.
func jsonEqual(t *testing.T, a, b json.RawMessage) bool {
	t.Helper()
	if len(bytes.TrimSpace(a)) == 0 || len(bytes.TrimSpace(b)) == 0 {
		return len(bytes.TrimSpace(a)) == len(bytes.TrimSpace(b))
	}
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatalf("decoding %s: %v", a, err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatalf("decoding %s: %v", b, err)
	}
	return reflect.DeepEqual(va, vb)
}

func TestRecordJSONOmitsRevision(t *testing.T) {
	r := newRecord("acme", "wf")
	r.Revision = 7
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"revision", "Revision"} {
		if _, ok := m[k]; ok {
			t.Errorf("stored JSON %s has %q", b, k)
		}
	}
	for _, k := range []string{"tenant", "workflowId", "runId", "status", "startedAt", "lastActiveAt", "events", "state"} {
		if _, ok := m[k]; !ok {
			t.Errorf("stored JSON %s lacks %q", b, k)
		}
	}
}

func TestPutInvalidState(t *testing.T) {
	ctx, s := setup(t)
	r := newRecord("acme", "acme:Echo:Conversational:bad")
	r.State = json.RawMessage(`{not json`)
	if _, err := s.Put(ctx, r); err == nil || errors.Is(err, instance.ErrConflict) {
		t.Errorf("Put with invalid state JSON err = %v, want an encoding error", err)
	}
	if _, err := s.Get(ctx, "acme", r.WorkflowID); !errors.Is(err, instance.ErrNotFound) {
		t.Errorf("record with invalid state was stored: Get err = %v", err)
	}
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
		switch {
		case err == nil:
			won++
		case errors.Is(err, instance.ErrConflict):
			lost++
		default:
			t.Errorf("unexpected error: %v", err)
		}
	}
	if won != 1 || lost != starters-1 {
		t.Errorf("%d starters won and %d lost, want 1 and %d", won, lost, starters-1)
	}
}
