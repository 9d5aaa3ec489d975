package bus

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"

	"github.com/nats-io/nats.go/jetstream"
)

// DeclaredKey is the metadata key under which Ensure records, on every stream it declares
// (those of the buckets and object stores too), a fingerprint of the configuration it declared.
// A resource whose fingerprint matches is left as it is: every process calls Ensure when it
// starts, and most find everything declared as they would declare it. Changing a setting that
// shapes a resource (replicas, partitions, a retention) changes its fingerprint, and the next
// Ensure updates it.
const DeclaredKey = "agentbus.declared"

// fingerprint is a short digest of a resource's configuration as Ensure declares it, before
// the server fills in its defaults.
func fingerprint(cfg any) string {
	b, err := json.Marshal(cfg)
	if err != nil {
		// Configurations are plain data; a failure only means the resource is updated.
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:12])
}

// withFingerprint returns metadata with the fingerprint fp added, leaving md unchanged.
func withFingerprint(md map[string]string, fp string) map[string]string {
	out := maps.Clone(md)
	if out == nil {
		out = make(map[string]string, 1)
	}
	out[DeclaredKey] = fp
	return out
}

// declared reports whether the stream name exists with the fingerprint fp, and returns it
// then. A stream that does not exist yet is not an error.
func declared(ctx context.Context, js jetstream.JetStream, name, fp string) (jetstream.Stream, bool, error) {
	if fp == "" {
		return nil, false, nil
	}
	s, err := js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("reading stream %s: %w", name, err)
	}
	return s, s.CachedInfo().Config.Metadata[DeclaredKey] == fp, nil
}
