package agent

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/bus"
)

// File is an uploaded file as a File handler sees it. Ingress has decoded and checked the
// content: Empty and Invalid tell the handler when there is nothing to read, so that it can
// answer as the interface asks (docs/interface.md#41-send-message-admin, rules 3 and 4).
type File struct {
	// Name is the file name: the data object's fileName, else the message text.
	Name string
	// ContentType is the media type the client gave, if any.
	ContentType string
	// Size of the content in bytes.
	Size int64
	// SHA256 is the hex SHA-256 of the content.
	SHA256 string
	// Tenant the file belongs to.
	Tenant string
	// Empty: no content was sent.
	Empty bool
	// Invalid: the content was not valid base64.
	Invalid bool

	object string
	store  jetstream.ObjectStore
}

// Bytes reads the file's content. Files are kept in the AGENTBUS_FILES object store, so they may
// be larger than one NATS message.
func (f *File) Bytes(ctx context.Context) ([]byte, error) {
	if f.Empty || f.Invalid || f.object == "" {
		return nil, nil
	}
	b, err := bus.ReadObject(ctx, f.store, f.object)
	if err != nil {
		return nil, fmt.Errorf("reading file %s: %w", f.Name, err)
	}
	return b, nil
}
