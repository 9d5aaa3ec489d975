module github.com/agentbus/agentbus

go 1.26.8

require (
	github.com/getkin/kin-openapi v0.152.0
	github.com/google/uuid v1.6.0
	github.com/gorilla/mux v1.8.1
	github.com/nats-io/nats-server/v2 v2.15.3
	github.com/nats-io/nats.go v1.56.0
	github.com/nats-io/nuid v1.0.1
	github.com/prometheus/client_golang v1.25.0
	github.com/prometheus/client_model v0.6.3
	github.com/stretchr/testify v1.12.1
	go.opentelemetry.io/otel v1.47.0
	go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc v1.47.0 // OTLP over gRPC: OTEL_EXPORTER_OTLP_PROTOCOL=grpc (pkg/tracing)
	go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp v1.47.0
	go.opentelemetry.io/otel/sdk v1.47.0
	go.opentelemetry.io/otel/trace v1.47.0
	go.opentelemetry.io/proto/otlp v1.11.0 // tests: an OTLP collector receiving the exported spans (pkg/tracing)
	go.uber.org/goleak v1.3.0
	go.yaml.in/yaml/v3 v3.0.5 // tests: parse docker-compose.yml and deploy/k8s manifests (deploy/deploy_test.go)
	golang.org/x/time v0.16.0
	google.golang.org/grpc v1.83.2 // tests: the OTLP collector's gRPC server (pkg/tracing); the gRPC exporter needs it anyway
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/chromedp/cdproto v0.159.0 // tests: the playground and the console in headless Chromium (pkg/pages)
	github.com/chromedp/chromedp v0.23.0 // tests: the playground and the console in headless Chromium (pkg/pages)
	github.com/modelcontextprotocol/go-sdk v1.8.0 // the official MCP SDK: POST /mcp (pkg/ingress/mcp.go)
	github.com/santhosh-tekuri/jsonschema/v6 v6.0.3 // Data methods' parameters checked against their JSON Schema (pkg/jsonschema)
	golang.org/x/sys v0.50.0 // bench: timerfd, the open loop's precise sleep that leaves the scheduler's P free (bench/sleep_linux.go)
	golang.org/x/text v0.43.0 // the English wording of the schema validator's messages (pkg/jsonschema)
)

require (
	github.com/antithesishq/antithesis-sdk-go v0.9.0-default-no-op // indirect
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cenkalti/backoff/v5 v5.0.3 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/go-json-experiment/json v0.0.0-20260213210345-44df1a37e875 // indirect
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/go-openapi/jsonpointer v1.0.0 // indirect
	github.com/google/go-tpm v0.9.8 // indirect
	github.com/google/jsonschema-go v0.4.3 // indirect
	github.com/grpc-ecosystem/grpc-gateway/v2 v2.30.0 // indirect
	github.com/klauspost/compress v1.20.4 // indirect
	github.com/kylelemons/godebug v1.1.0 // indirect
	github.com/minio/highwayhash v1.0.4 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/nats-io/jwt/v2 v2.8.3 // indirect
	github.com/nats-io/nkeys v0.4.17 // indirect
	github.com/oasdiff/yaml v0.1.1 // indirect
	github.com/oasdiff/yaml3 v0.0.14 // indirect
	github.com/prometheus/common v0.72.0 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	github.com/segmentio/asm v1.1.3 // indirect
	github.com/segmentio/encoding v0.5.4 // indirect
	github.com/yosida95/uritemplate/v3 v3.0.2 // indirect
	go.opentelemetry.io/auto/sdk v1.2.1 // indirect
	go.opentelemetry.io/otel/exporters/otlp/otlptrace v1.47.0 // indirect
	go.opentelemetry.io/otel/log v1.47.0 // indirect
	go.opentelemetry.io/otel/metric v1.47.0 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/oauth2 v0.37.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	google.golang.org/genproto/googleapis/api v0.0.0-20260928230214-8a89bd6388cc // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260928230214-8a89bd6388cc // indirect
)

ignore ./sdk/typescript/node_modules
