package main

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"
	"unicode/utf8"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/agents/echo"
	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/keys"
	"github.com/agentbus/agentbus/pkg/stack"
)

// benchParams are the query parameters (besides the key) of every request.
var benchParams = map[string]string{"n": "1"}

// workflowID is the workflow the i-th instance of the load is addressed to.
func workflowID(i int) string { return fmt.Sprintf("default:Echo:Supervisor Workflow:bench-%d", i) }

// startAgentbus starts the whole stack in-process on a temporary store, seeds a tenant-admin key
// and returns the webhook URLs of o.Instances Echo instances and a function that stops the stack
// and removes the store.
func startAgentbus(ctx context.Context, o options) (urls []string, stop func() error, err error) {
	dir, err := os.MkdirTemp("", "agentbus-bench-")
	if err != nil {
		return nil, nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := stack.Start(sctx, stack.Config{
		DataDir:  dir,
		HTTPAddr: "127.0.0.1:0",
		Agents:   []*agent.Agent{echo.New()},
		Bus:      bus.Config{Partitions: o.Partitions},
		Logger:   nil,
	})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, nil, fmt.Errorf("starting the stack: %w", err)
	}
	stop = func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return errors.Join(st.Stop(ctx), os.RemoveAll(dir))
	}
	defer func() {
		if err != nil {
			_ = stop()
		}
	}()

	if err = st.Keys.EnsureTenant(sctx, "default"); err != nil {
		return nil, nil, fmt.Errorf("creating tenant: %w", err)
	}
	key, _, err := st.Keys.Create(sctx, keys.NewKey{Tenant: "default", Role: keys.RoleTenantAdmin, Name: "bench"})
	if err != nil {
		return nil, nil, fmt.Errorf("creating key: %w", err)
	}
	// Keys reach the ingress through its watch of the keys bucket.
	for !st.Ingress.KeyKnown(key) {
		if !sleepUntil(sctx, time.Now().Add(2*time.Millisecond)) {
			err = fmt.Errorf("waiting for the key to reach the ingress: %w", sctx.Err())
			return nil, nil, err
		}
	}

	query := url.Values{"apikey": {key}}
	for k, v := range benchParams {
		query.Set(k, v)
	}
	qs := query.Encode()
	urls = make([]string, o.Instances)
	for i := range urls {
		urls[i] = st.URL + "/api/user/webhooks/" + url.PathEscape(workflowID(i)) + "/echo?" + qs
	}
	return urls, stop, nil
}

// startBare serves, on a loopback port, a plain handler that reads the body and answers 200 with
// the JSON that Echo's echo method would give for o.Body (computed once), and returns o.Instances
// URLs of the same shape as the agentbus phase's and a function that stops the server.
func startBare(o options) (urls []string, stop func() error, err error) {
	answer, err := echoAnswer(o.Body, benchParams)
	if err != nil {
		return nil, nil, err
	}
	// Same header set as the ingress sends: a 36-character request id and the content type.
	const requestID = "00000000-0000-4000-8000-000000000000"
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("X-Request-Id", requestID)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(answer)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	stop = func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err := srv.Shutdown(ctx)
		if serr := <-done; !errors.Is(serr, http.ErrServerClosed) {
			err = errors.Join(err, serr)
		}
		return err
	}

	base := "http://" + ln.Addr().String()
	query := url.Values{"apikey": {keys.Generate()}} // same URL length as the agentbus phase
	for k, v := range benchParams {
		query.Set(k, v)
	}
	qs := query.Encode()
	urls = make([]string, o.Instances)
	for i := range urls {
		urls[i] = base + "/api/user/webhooks/" + url.PathEscape(workflowID(i)) + "/echo?" + qs
	}
	return urls, stop, nil
}

// echoAnswer is the body Echo's echo method answers for body and params.
func echoAnswer(body []byte, params map[string]string) ([]byte, error) {
	sum := sha256.Sum256(body)
	out := map[string]any{"params": params, "size": len(body), "sha256": hex.EncodeToString(sum[:])}
	if utf8.Valid(body) {
		out["body"] = string(body)
	} else {
		out["bodyBase64"] = base64.StdEncoding.EncodeToString(body)
	}
	return json.Marshal(out)
}
