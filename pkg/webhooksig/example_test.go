package webhooksig_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"time"

	"github.com/agentbus/agentbus/pkg/agent"
	"github.com/agentbus/agentbus/pkg/webhooksig"
)

// A webhook method that acts only on GitHub's genuine deliveries: Require answers 401 to any
// other call before the handler runs. A real agent reads the secret from its configuration,
// passes its *slog.Logger (nil discards the refusals) and is run by an agent.Host; here the
// handler is called directly, with what the ingress would pass it.
func Example() {
	secret := []byte("It's a Secret to Everybody") // the webhook's secret, as entered in GitHub

	push := webhooksig.Require(webhooksig.GitHub{Secret: secret}, nil)(agent.WebhookFunc(
		func(ctx context.Context, r *agent.WebhookRequest) agent.Response {
			// Only verified calls get here.
			return agent.Text(http.StatusOK, "deploying "+r.Header["X-Github-Delivery"])
		}))
	deployer := agent.New("Deployer")
	deployer.Webhook("push", push)

	// GitHub signs with "sha256=" and the hex HMAC-SHA256 of the body.
	body := []byte("Hello, World!")
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	genuine := "sha256=" + hex.EncodeToString(m.Sum(nil))
	forged := "sha256=" + hex.EncodeToString(make([]byte, sha256.Size))

	for _, sig := range []string{genuine, forged, ""} {
		resp := push.ServeWebhook(context.Background(), &agent.WebhookRequest{
			Method: "push",
			Body:   body,
			Header: map[string]string{"X-Github-Delivery": "72d3162e", "X-Hub-Signature-256": sig},
		})
		fmt.Println(resp.StatusCode, string(resp.Content))
	}
	// Output:
	// 200 deploying 72d3162e
	// 401 invalid webhook signature
	// 401 missing webhook signature
}

// Verifying inside a handler, here Slack's request from its documentation; Reject builds the
// answer. Now is set only because the documented request is from 2018: left nil, it is
// time.Now, and calls more than Tolerance (5 minutes) away from it are refused.
func Example_inline() {
	slack := webhooksig.Slack{
		Secret: []byte("8f742231b10e8888abcd99yyyzzz85a5"), // the app's signing secret
		Now:    func() time.Time { return time.Unix(1531420618, 0).Add(time.Minute) },
	}
	command := func(ctx context.Context, r *agent.WebhookRequest) agent.Response {
		if err := slack.Verify(r.Header, r.Body); err != nil {
			return webhooksig.Reject(err)
		}
		return agent.Text(http.StatusOK, "collected")
	}

	r := &agent.WebhookRequest{
		Body: []byte(slackBody),
		Header: map[string]string{
			"X-Slack-Request-Timestamp": "1531420618",
			"X-Slack-Signature":         "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503",
		},
	}
	resp := command(context.Background(), r)
	fmt.Println(resp.StatusCode, string(resp.Content))

	slack.Now = time.Now
	resp = command(context.Background(), r)
	fmt.Println(resp.StatusCode, string(resp.Content))
	// Output:
	// 200 collected
	// 401 webhook timestamp outside tolerance
}
