package conformance

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/remote"
)

// CheckRemoteEcho runs the registration check (remote.Check, what `agentbus agent check` runs)
// against a kit's Echo (EchoPy, EchoTS) from its registration, raw as the kit printed it: every
// case passes, and the cases of its Data methods, state and journal say what the reference
// Echo's methods (docs/echo.md) make them say.
func CheckRemoteEcho(t *testing.T, raw map[string]any) {
	t.Helper()
	b, err := json.Marshal(raw)
	require.NoError(t, err)
	var reg remote.Registration
	require.NoError(t, json.Unmarshal(b, &reg))
	byCase := map[string]string{}
	for _, r := range remote.Check(t.Context(), reg) {
		t.Logf("ok=%v %s: %s", r.OK, r.Case, r.Detail)
		assert.True(t, r.OK, "%s: %s", r.Case, r.Detail)
		byCase[r.Case] = r.Detail
	}
	// Every Data method is sent its schema's first example, and the state cases run on count:
	// its counter goes up with each request, and the request sent again with a fresher state
	// is answered from it.
	for _, m := range reg.Methods {
		assert.Regexp(t, `^answer; sent \{.*\} \((its example|the first of its \d+ examples)\)(; .* followed.*)?$`, byCase["Data "+m.Name+" answered"], m.Name)
	}
	assert.Equal(t, `answer; sent {"values":[2,3]} (the first of its 2 examples)`, byCase["Data sum answered"])
	// history, relay, steps and ask are followed as a host follows them, and history, the first
	// to follow one, sent again with its journal is answered from it.
	assert.Equal(t, `answer; sent {"size":5} (its example); 1 history read followed (each history read found no messages)`, byCase["Data history answered"])
	assert.Equal(t, `answer; sent {"activation":"b","method":"count"} (its example); 1 call followed `+
		`(each call failed with 503, "agentbus agent check makes no Agent2Agent calls")`, byCase["Data relay answered"])
	assert.Equal(t, `answer; sent {"n":2,"sleepMs":10} (its example); 2 steps followed`, byCase["Data steps answered"])
	assert.Equal(t, `answer; sent {"question":"Which colour?","timeoutS":60} (its example); 1 wait followed (each wait ended by its deadline)`, byCase["Data ask answered"])
	assert.Equal(t, "Data history sent again with its journal of 1 entries: answered from it, without a new step or wait", byCase[remote.CaseJournal])
	assert.Equal(t, "Data count: 3 requests answered; the state changed 3 times", byCase[remote.CaseOrder])
	assert.Equal(t, "Data count: answered from the fresher state", byCase[remote.CaseStateConflict])
}
