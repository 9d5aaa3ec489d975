package ingress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentbus/agentbus/pkg/subject"
)

// rateSharing tells the other ingress instances, every demandEvery over core NATS
// (subject.IngressDemand), the demand this instance sees of its busy keys and tenants, and
// takes in theirs, so that the limiter's shares add up to the rates (ratelimit.go). It sends
// nothing while nothing is busy.
type rateSharing struct {
	conn     *nats.Conn
	instance string
	limits   *limiter
	// present returns the other instances heard lately (confirmer.present).
	present func() []string
	log     *slog.Logger
	sub     *nats.Subscription
	ctx     context.Context // ends with close
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	// warned: a report did not fit a message, logged once.
	warned sync.Once
}

// startRateSharing subscribes to the other instances' reports and starts sending this one's.
func startRateSharing(conn *nats.Conn, instance string, limits *limiter, present func() []string, log *slog.Logger) (*rateSharing, error) {
	ctx, cancel := context.WithCancel(context.Background())
	rs := &rateSharing{conn: conn, instance: instance, limits: limits, present: present, log: log, ctx: ctx, cancel: cancel}
	var err error
	if rs.sub, err = conn.Subscribe(subject.IngressDemand, rs.heard); err != nil {
		cancel()
		return nil, fmt.Errorf("subscribing to rate demand: %w", err)
	}
	rs.wg.Go(rs.run)
	return rs, nil
}

// close stops sending and taking in reports, and sends an empty one: the others no longer
// count this instance's demand. A connection closed already is not an error.
func (rs *rateSharing) close() error {
	rs.cancel()
	rs.wg.Wait()
	rs.send(&demandReport{V: demandVersion, Tenants: []tenantDemand{}})
	err := rs.sub.Unsubscribe()
	if errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, nats.ErrBadSubscription) {
		return nil
	}
	return err
}

func (rs *rateSharing) run() {
	t := time.NewTicker(demandEvery)
	defer t.Stop()
	for {
		select {
		case <-rs.ctx.Done():
			return
		case <-t.C:
			if rep := rs.limits.tick(time.Now(), 1+len(rs.present())); rep != nil {
				rs.send(rep)
			}
		}
	}
}

// send publishes a report of this instance.
func (rs *rateSharing) send(rep *demandReport) {
	rep.Instance = rs.instance
	b, err := json.Marshal(rep)
	if err != nil {
		rs.log.Error("encoding rate demand", "err", err)
		return
	}
	if int64(len(b)) > rs.conn.MaxPayload() {
		rs.warned.Do(func() {
			rs.log.Warn("rate demand report larger than a NATS message; not sent", "bytes", len(b), "max", rs.conn.MaxPayload())
		})
		return
	}
	if err := rs.conn.Publish(subject.IngressDemand, b); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		rs.log.Warn("sending rate demand", "err", err)
	}
}

// heard takes in another instance's report.
func (rs *rateSharing) heard(m *nats.Msg) {
	var rep demandReport
	if err := json.Unmarshal(m.Data, &rep); err != nil || rep.Instance == rs.instance {
		return
	}
	if err := rs.limits.received(rep); err != nil {
		rs.log.Debug("ignoring a rate demand report", "from", rep.Instance, "err", err)
	}
}
