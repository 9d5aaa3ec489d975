package llm_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/agentbus/agentbus/pkg/llm"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		config  llm.Config
		wantErr string // "" means valid
	}{
		{name: "zero is offline", config: llm.Config{}},
		{name: "remote", config: llm.Config{BaseURL: "http://localhost:11434/v1", Model: "llama3.2"}},
		{name: "remote with key", config: llm.Config{BaseURL: "https://api.example.com/v1", Model: "m", APIKey: testAPIKey, Timeout: time.Second, MaxRetries: -1}},
		{name: "model without URL", config: llm.Config{Model: "m"}, wantErr: "BaseURL is empty"},
		{name: "key without URL", config: llm.Config{APIKey: testAPIKey}, wantErr: "BaseURL is empty"},
		{name: "no model", config: llm.Config{BaseURL: "http://localhost:11434/v1"}, wantErr: "Model is required"},
		{name: "relative URL", config: llm.Config{BaseURL: "localhost:11434/v1", Model: "m"}, wantErr: "absolute http"},
		{name: "other scheme", config: llm.Config{BaseURL: "ftp://host/v1", Model: "m"}, wantErr: "absolute http"},
		{name: "unparsable URL", config: llm.Config{BaseURL: "http://user:" + testAPIKey + "@host:port:x/", Model: "m"}, wantErr: "not a valid URL"},
		{name: "negative timeout", config: llm.Config{BaseURL: "http://h/v1", Model: "m", Timeout: -time.Second}, wantErr: "negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.config.Validate()
			_, newErr := llm.New(tt.config)
			if tt.wantErr == "" {
				assert.NoError(t, err, "Validate; want valid")
				assert.NoError(t, newErr, "New; want valid")
			} else {
				assert.ErrorContains(t, err, tt.wantErr, "Validate")
				assert.Error(t, newErr, "New accepted an invalid Config")
			}
			if err != nil {
				assert.NotContains(t, err.Error(), testAPIKey, "Validate error contains the key")
			}
		})
	}
}

func TestConfigDoesNotPrintKey(t *testing.T) {
	t.Parallel()
	c := llm.Config{BaseURL: "http://user:secret@localhost:11434/v1", Model: "llama3.2", APIKey: testAPIKey}
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("llm", "config", c)
	slog.New(slog.NewTextHandler(&logged, nil)).Info("llm", "config", c)
	for _, s := range []string{fmt.Sprint(c), fmt.Sprintf("%+v", c), c.String(), logged.String()} {
		assert.NotContains(t, s, testAPIKey, "shows a secret")
		assert.NotContains(t, s, "secret", "shows a secret")
		assert.Contains(t, s, "llama3.2", "does not name the model")
	}
}
