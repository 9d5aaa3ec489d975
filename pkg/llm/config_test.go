package llm_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

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
			switch {
			case tt.wantErr == "" && (err != nil || newErr != nil):
				t.Errorf("Validate = %v, New = %v; want valid", err, newErr)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("Validate = %v, want an error containing %q", err, tt.wantErr)
			case tt.wantErr != "" && newErr == nil:
				t.Error("New accepted an invalid Config")
			case err != nil && strings.Contains(err.Error(), testAPIKey):
				t.Errorf("Validate error %q contains the key", err)
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
		if strings.Contains(s, testAPIKey) || strings.Contains(s, "secret") {
			t.Errorf("%q shows a secret", s)
		}
		if !strings.Contains(s, "llama3.2") {
			t.Errorf("%q does not name the model", s)
		}
	}
}
