package ingress

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"

	"github.com/agentbus/agentbus/pkg/outbound"
	"github.com/agentbus/agentbus/pkg/problem"
	"github.com/agentbus/agentbus/pkg/subscription"
)

// subscriptionsPath is the collection of a tenant's event subscriptions (docs/subscriptions.md).
const subscriptionsPath = tenantsPath + "/{tenantId}/subscriptions"

// listSubscriptions serves GET …/subscriptions: the tenant's subscriptions, oldest first,
// without their secrets.
func (s *Server) listSubscriptions(w http.ResponseWriter, r *http.Request) {
	c, ok := s.identifyAdmin(w, r, adminAccess)
	if !ok {
		return
	}
	subs, err := s.subs.List(r.Context(), c.tenant)
	if err != nil {
		s.subscriptionFailed(w, "listing subscriptions", err)
		return
	}
	out := subscription.List{Subscriptions: make([]subscription.Subscription, 0, len(subs))}
	for _, sub := range subs {
		out.Subscriptions = append(out.Subscriptions, sub.Redacted())
	}
	writeJSON(w, http.StatusOK, out)
}

// createSubscription serves POST …/subscriptions. The answer is the only one that shows the
// signing secret.
func (s *Server) createSubscription(w http.ResponseWriter, r *http.Request) {
	c, ok := s.identifyAdmin(w, r, adminAccess)
	if !ok {
		return
	}
	var body subscription.New
	if p := decodeAdminBody(w, r, &body); p != nil {
		problem.Write(w, *p)
		return
	}
	sub, err := s.subs.Create(r.Context(), c.tenant, body)
	if err != nil {
		s.subscriptionFailed(w, "creating subscription", err)
		return
	}
	s.log.Info("subscription created", "tenant", c.tenant, "subscription", sub.ID, "url", sub.URL, "events", sub.Events, "by", c.key.ID)
	w.Header().Set("Location", tenantsPath+"/"+c.tenant+"/subscriptions/"+sub.ID)
	writeJSON(w, http.StatusCreated, sub)
}

func (s *Server) getSubscription(w http.ResponseWriter, r *http.Request) {
	c, ok := s.identifyAdmin(w, r, adminAccess)
	if !ok {
		return
	}
	sub, err := s.subs.Get(r.Context(), c.tenant, r.PathValue("subscriptionId"))
	if err != nil {
		s.subscriptionFailed(w, "reading subscription", err)
		return
	}
	writeJSON(w, http.StatusOK, sub.Redacted())
}

// deleteSubscription serves DELETE …/subscriptions/{subscriptionId}: no more events are
// delivered (one in flight may still arrive), and its undelivered events are removed.
func (s *Server) deleteSubscription(w http.ResponseWriter, r *http.Request) {
	c, ok := s.identifyAdmin(w, r, adminAccess)
	if !ok {
		return
	}
	id := r.PathValue("subscriptionId")
	if err := s.subs.Delete(r.Context(), c.tenant, id); err != nil {
		s.subscriptionFailed(w, "deleting subscription", err)
		return
	}
	s.log.Info("subscription deleted", "tenant", c.tenant, "subscription", id, "by", c.key.ID)
	w.WriteHeader(http.StatusNoContent)
}

// listUndelivered serves GET …/subscriptions/{subscriptionId}/undelivered?after=&limit=.
func (s *Server) listUndelivered(w http.ResponseWriter, r *http.Request) {
	c, ok := s.identifyAdmin(w, r, adminAccess)
	if !ok {
		return
	}
	after, limit, p := undeliveredPaging(r)
	if p != nil {
		problem.Write(w, *p)
		return
	}
	events, next, err := s.subs.ListUndelivered(r.Context(), c.tenant, r.PathValue("subscriptionId"), after, limit)
	if err != nil {
		s.subscriptionFailed(w, "listing undelivered events", err)
		return
	}
	writeJSON(w, http.StatusOK, subscription.UndeliveredPage{Events: events, Next: next})
}

// undeliveredPaging reads the list's after and limit, each optional.
func undeliveredPaging(r *http.Request) (after uint64, limit int, p *problem.Problem) {
	q, p := readQuery(r)
	if p != nil {
		return 0, 0, p
	}
	if v := q.Get("after"); v != "" {
		var err error
		if after, err = strconv.ParseUint(v, 10, 64); err != nil || after > math.MaxInt64 {
			return 0, 0, problem.InvalidQuery.New(fmt.Sprintf("after must be an event id: a whole number from 0 to %d", int64(math.MaxInt64)))
		}
	}
	limit = subscription.DefaultLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > subscription.MaxLimit {
			return 0, 0, problem.InvalidQuery.New(fmt.Sprintf("limit must be a whole number from 1 to %d", subscription.MaxLimit))
		}
		limit = n
	}
	return after, limit, nil
}

// undeliveredTarget identifies the caller and the undelivered event the path names.
func (s *Server) undeliveredTarget(w http.ResponseWriter, r *http.Request) (c caller, id uint64, ok bool) {
	if c, ok = s.identifyAdmin(w, r, adminAccess); !ok {
		return c, 0, false
	}
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
	if err != nil || id == 0 {
		problem.InvalidEventID.Write(w, "an undelivered event's id is a whole number from 1, as the list shows it")
		return c, 0, false
	}
	return c, id, true
}

// replayUndelivered serves POST …/undelivered/{id}/replay: one delivery now, answered with what
// the receiver did. An accepted event is removed; a refused one stays.
func (s *Server) replayUndelivered(w http.ResponseWriter, r *http.Request) {
	c, id, ok := s.undeliveredTarget(w, r)
	if !ok {
		return
	}
	sub := r.PathValue("subscriptionId")
	ev, err := s.subs.Replay(r.Context(), c.tenant, sub, id)
	if err != nil {
		s.subscriptionFailed(w, "replaying an undelivered event", err)
		return
	}
	s.log.Info("undelivered event replayed", "tenant", c.tenant, "subscription", sub, "event", ev.EventID, "by", c.key.ID)
	writeJSON(w, http.StatusOK, subscription.Replayed{Delivered: true, Event: ev})
}

func (s *Server) discardUndelivered(w http.ResponseWriter, r *http.Request) {
	c, id, ok := s.undeliveredTarget(w, r)
	if !ok {
		return
	}
	if err := s.subs.Discard(r.Context(), c.tenant, r.PathValue("subscriptionId"), id); err != nil {
		s.subscriptionFailed(w, "discarding an undelivered event", err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// subscriptionFailed answers a failure of the subscription store: what the caller can act on is
// told; anything else is logged and answered as a bus outage.
func (s *Server) subscriptionFailed(w http.ResponseWriter, what string, err error) {
	var status *subscription.StatusError
	switch {
	case errors.Is(err, subscription.ErrNotFound):
		problem.SubscriptionNotFound.Write(w, "the tenant has no subscription with this id")
	case errors.Is(err, subscription.ErrEventNotFound):
		problem.EventNotFound.Write(w, "the subscription has no undelivered event with this id")
	case errors.Is(err, subscription.ErrLimit):
		problem.SubscriptionLimit.Write(w, "the tenant has as many subscriptions as it may have; delete one first")
	case errors.Is(err, outbound.ErrURLNotAllowed):
		problem.URLNotAllowed.Write(w, "the url does not match the operator's allow-list of subscription receivers (AGENTBUS_OUTBOUND_URLS)")
	case errors.Is(err, subscription.ErrInvalid):
		problem.InvalidField.Write(w, err.Error())
	case errors.As(err, &status):
		problem.ReceiverFailed.Write(w, fmt.Sprintf("the receiver answered %d; the event is kept", status.Code))
	case errors.Is(err, subscription.ErrUnreachable):
		problem.ReceiverFailed.Write(w, "the receiver could not be reached; the event is kept")
	default:
		s.storeFailed(w, what, err)
	}
}
