package main

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/keys"
	"github.com/agentbus/agentbus/pkg/natsembed"
)

// The pipeline phase is the floor under the agentbus phase: the least a platform that keeps
// every request in JetStream can do per webhook call, on the same embedded server and store. An
// HTTP handler publishes the body to a file-stored work-queue stream (one subject per instance)
// and waits for the acknowledgement and a reply; workers pull from one consumer, compute Echo's
// answer, publish it to the handler's reply subject and acknowledge. No envelope, history,
// instance state, authentication, routing table or metrics.
const phasePipeline = "pipeline"

// pipelineStream is the pipeline's stream.
const pipelineStream = "BENCH_PIPELINE"

// startPipeline starts the pipeline and returns the webhook load against it and a function that
// stops it.
func startPipeline(ctx context.Context, o options) (ep endpoint, stop func() error, err error) {
	if o.Target != targetWebhook {
		return endpoint{}, nil, fmt.Errorf("the %s phase serves the webhook target only", phasePipeline)
	}
	dir, err := os.MkdirTemp("", "agentbus-bench-pipeline-")
	if err != nil {
		return endpoint{}, nil, err
	}
	ns, err := natsembed.Start(natsembed.Config{StoreDir: dir})
	if err != nil {
		_ = os.RemoveAll(dir)
		return endpoint{}, nil, err
	}
	var closers []func() error
	stop = func() error {
		var errs []error
		for i := len(closers) - 1; i >= 0; i-- {
			errs = append(errs, closers[i]())
		}
		ns.Stop()
		return errors.Join(append(errs, os.RemoveAll(dir))...)
	}
	defer func() {
		if err != nil {
			_ = stop()
		}
	}()
	// Two connections, as the ingress and the host have.
	front, err := ns.Connect("bench-pipeline-front")
	if err != nil {
		return endpoint{}, nil, err
	}
	closers = append(closers, func() error { front.Close(); return nil })
	back, err := ns.Connect("bench-pipeline-back")
	if err != nil {
		return endpoint{}, nil, err
	}
	closers = append(closers, func() error { back.Close(); return nil })

	fjs, err := jetstream.New(front)
	if err != nil {
		return endpoint{}, nil, err
	}
	bjs, err := jetstream.New(back)
	if err != nil {
		return endpoint{}, nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	stream, err := fjs.CreateStream(sctx, jetstream.StreamConfig{
		Name: pipelineStream, Subjects: []string{"pipe.>"}, Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage,
	})
	if err != nil {
		return endpoint{}, nil, fmt.Errorf("creating the pipeline stream: %w", err)
	}
	cons, err := bjs.CreateOrUpdateConsumer(sctx, stream.CachedInfo().Config.Name, jetstream.ConsumerConfig{
		Durable: "workers", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxAckPending: 10000,
	})
	if err != nil {
		return endpoint{}, nil, fmt.Errorf("creating the pipeline consumer: %w", err)
	}
	it, err := cons.Messages()
	if err != nil {
		return endpoint{}, nil, fmt.Errorf("pulling: %w", err)
	}
	var workers sync.WaitGroup
	closers = append(closers, func() error { it.Stop(); workers.Wait(); return nil })
	for range o.Clients {
		workers.Go(func() {
			for {
				m, err := it.Next()
				if err != nil {
					return
				}
				answer, err := echoAnswer(m.Data(), benchParams)
				if err != nil {
					answer = []byte(err.Error())
				}
				if to := m.Headers().Get("Bench-Reply-To"); to != "" {
					_ = back.Publish(to, answer)
				}
				_ = m.Ack()
			}
		})
	}

	// Replies come to one subscription and go to their waiters by token.
	var (
		mu      sync.Mutex
		waiters = map[string]chan []byte{}
		next    atomic.Uint64
	)
	sub, err := front.Subscribe("_BENCH.replies.*", func(m *nats.Msg) {
		token := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
		mu.Lock()
		ch := waiters[token]
		mu.Unlock()
		if ch != nil {
			ch <- m.Data
		}
	})
	if err != nil {
		return endpoint{}, nil, err
	}
	closers = append(closers, sub.Unsubscribe)

	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		hash := fnv.New32a()
		_, _ = hash.Write([]byte(r.URL.EscapedPath()))
		token := strconv.FormatUint(next.Add(1), 36)
		ch := make(chan []byte, 1)
		mu.Lock()
		waiters[token] = ch
		mu.Unlock()
		defer func() {
			mu.Lock()
			delete(waiters, token)
			mu.Unlock()
		}()
		msg := &nats.Msg{Subject: "pipe." + strconv.FormatUint(uint64(hash.Sum32()), 10), Data: body, Header: nats.Header{}}
		msg.Header.Set("Bench-Reply-To", "_BENCH.replies."+token)
		ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
		defer cancel()
		if _, err := fjs.PublishMsg(ctx, msg); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		select {
		case answer := <-ch:
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Request-Id", "00000000-0000-4000-8000-000000000000")
			_, _ = w.Write(answer)
		case <-ctx.Done():
			http.Error(w, "no reply", http.StatusGatewayTimeout)
		}
	})
	base, stopHTTP, err := serveLoopback(h)
	if err != nil {
		return endpoint{}, nil, err
	}
	closers = append(closers, stopHTTP)
	// A made-up key of the real one's length keeps the requests' sizes the same.
	ep, err = newEndpoint(o, base, keys.Generate())
	return ep, stop, err
}
