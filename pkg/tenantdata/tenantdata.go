// Package tenantdata erases what a tenant stored, for the deletion of the tenant: its
// conversations and their topic lists, its workflow instances and their run index, the journals
// of durable steps, its waiting requests and those held behind them, the results of its requests
// with caller-chosen ids, its files and claim-checked payloads, the requests it left in the
// agents' inboxes, the hosts' grants of its concurrency caps, and its usage counters. What the other stores keep of a tenant (keys, limits,
// dead letters, event subscriptions, remote agents, timers) their own packages remove.
//
// A tenant's records in every stream and bucket are found by a subject filter of the tenant
// (package subject), so each store costs one purge whatever the tenant's size (the usage
// counters cost one each, usage.EraseTenant); only the object stores are listed, their names not
// being subjects.
package tenantdata

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/subject"
	"github.com/agentbus/agentbus/pkg/usage"
)

// Erase removes every record of tenant from the stores of res. Erasing again removes what was
// written since (by a request of the tenant that was running meanwhile) and costs the same
// reads and purges when there is nothing left. An invalid tenant id is refused before anything
// is read: a filter is built of it.
func Erase(ctx context.Context, res *bus.Resources, tenant string) error {
	return erase(ctx, res, tenant, true)
}

// EraseRecords is Erase without the object stores (files, claim-checked payloads), which only a
// reading of every object's name searches: for an id a tenant is made with, whose deleted
// tenant's objects went with it, and whose requests running at that deletion could have written
// records after it (their answers, their instances, their counters), not files. It costs a purge
// of each stream and bucket, and a listing of the inboxes; it zeroes the usage counters once,
// without waiting for the Meters' next flush (usage.ZeroTenant).
func EraseRecords(ctx context.Context, res *bus.Resources, tenant string) error {
	return erase(ctx, res, tenant, false)
}

func erase(ctx context.Context, res *bus.Resources, tenant string, objects bool) error {
	if err := subject.CheckTenant("tenant", tenant); err != nil {
		return err
	}
	// The inboxes first: what the hosts are delivered from now on is not the tenant's.
	if err := purgeInboxes(ctx, res.JS, tenant); err != nil {
		return err
	}
	for _, p := range []struct {
		stream jetstream.Stream
		filter string
	}{
		{res.Waits, subject.TenantWaits(tenant)},
		{res.Steps, subject.TenantSteps(tenant)},
		{res.Runs, subject.TenantRuns(tenant)},
		{res.Messages, subject.TenantThreads(tenant)},
	} {
		if err := purge(ctx, p.stream, p.filter); err != nil {
			return err
		}
	}
	for _, b := range []struct {
		kv     jetstream.KeyValue
		filter string
	}{
		{res.Instances, subject.TenantKeys(subject.InstancesBucket, tenant)},
		{res.Topics, subject.TenantKeys(subject.TopicsBucket, tenant)},
		{res.Results, subject.TenantKeys(subject.ResultsBucket, tenant)},
		// Counts, no data; a tenant made with the id later starts without them.
		{res.SlotGrants, subject.TenantSlotGrants(tenant)},
	} {
		s, err := res.JS.Stream(ctx, subject.KVStream(b.kv.Bucket()))
		if err != nil {
			return fmt.Errorf("opening bucket %s: %w", b.kv.Bucket(), err)
		}
		if err := purge(ctx, s, b.filter); err != nil {
			return err
		}
	}
	if !objects {
		return usage.ZeroTenant(ctx, res.JS, tenant)
	}
	for _, o := range []struct {
		obs  jetstream.ObjectStore
		name string
	}{{res.Files, "files"}, {res.Claims, "claims"}} {
		if err := deleteObjects(ctx, o.obs, o.name, subject.TenantObjects(tenant)); err != nil {
			return err
		}
	}
	return usage.EraseTenant(ctx, res.JS, tenant)
}

// purge removes every message of s under filter.
func purge(ctx context.Context, s jetstream.Stream, filter string) error {
	if err := s.Purge(ctx, jetstream.WithPurgeSubject(filter)); err != nil {
		return fmt.Errorf("purging %s of %s: %w", filter, s.CachedInfo().Config.Name, err)
	}
	return nil
}

// purgeInboxes removes the tenant's requests from every agent's inbox stream.
func purgeInboxes(ctx context.Context, js jetstream.JetStream, tenant string) error {
	names := js.StreamNames(ctx, jetstream.WithStreamListSubject(subject.InboxesSubjects()))
	for name := range names.Name() {
		if !strings.HasPrefix(name, subject.InboxStreamPrefix) && name != subject.LegacyInboxStream {
			continue
		}
		s, err := js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue // deleted since it was listed (a removed remote agent's)
		}
		if err != nil {
			return fmt.Errorf("opening inbox %s: %w", name, err)
		}
		err = s.Purge(ctx, jetstream.WithPurgeSubject(subject.TenantInboxRequests(tenant)))
		if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("purging the tenant's requests of inbox %s: %w", name, err)
		}
	}
	if err := names.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
		return fmt.Errorf("listing the inboxes: %w", err)
	}
	return nil
}

// deleteObjects deletes the objects of obs (the store of name) whose names begin with prefix.
func deleteObjects(ctx context.Context, obs jetstream.ObjectStore, name, prefix string) error {
	infos, err := obs.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("listing the %s: %w", name, err)
	}
	for _, info := range infos {
		if !strings.HasPrefix(info.Name, prefix) {
			continue
		}
		if err := obs.Delete(ctx, info.Name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			return fmt.Errorf("deleting %s of the %s: %w", info.Name, name, err)
		}
	}
	return nil
}
