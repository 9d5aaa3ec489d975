#!/usr/bin/env bash
# Smoke test of the Docker Compose deployment (docker-compose.yml): 3 NATS nodes,
# 2 ingress, 3 workflow hosts. It builds and starts the stack, waits until every
# service reports healthy, creates tenant "smoke" and a key through the admin API,
# calls Echo through both ingress instances, and sends 30 conversations to see
# how many workflow hosts share the work. Then it stops the stack (the volumes,
# that is the data, stay) unless KEEP=1.
#
#   deploy/smoke.sh                # from anywhere; needs docker compose, curl
#   KEEP=1 deploy/smoke.sh         # leave the stack running afterwards
#
# AGENTBUS_ADMIN_KEY is used if set, else generated for this run. Exit status:
# 0 passed, 1 failed, 2 cannot run here (no Docker engine or compose plugin, no
# curl). Without Docker, `go test ./deploy/...` still checks the files statically.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

PORTS=(8080 8081)          # ingress-1, ingress-2 (docker-compose.yml)
HOSTS=3                    # workflowhost-1..3
ACTIVATIONS=30
TENANT=smoke

say() { printf 'smoke: %s\n' "$*"; }
fail() { printf 'smoke: FAIL: %s\n' "$*" >&2; exit 1; }

cannot_run() {
	printf 'smoke: cannot run here: %s\n' "$*" >&2
	printf 'smoke: it needs Docker with the compose plugin and a running engine, and curl;\n' >&2
	printf 'smoke: the static checks need neither: go test ./deploy/...\n' >&2
	exit 2
}

command -v docker >/dev/null 2>&1 || cannot_run "no docker command"
docker compose version >/dev/null 2>&1 || cannot_run "no docker compose plugin (docker compose version failed)"
docker info >/dev/null 2>&1 || cannot_run "no Docker engine reachable (docker info failed)"
command -v curl >/dev/null 2>&1 || cannot_run "no curl"

if [[ -z ${AGENTBUS_ADMIN_KEY:-} ]]; then
	if command -v openssl >/dev/null 2>&1; then
		AGENTBUS_ADMIN_KEY=$(openssl rand -hex 32)
	else
		AGENTBUS_ADMIN_KEY=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
	fi
	say "AGENTBUS_ADMIN_KEY was not set: generated one for this run (export it to reuse the stack with KEEP=1)"
fi
export AGENTBUS_ADMIN_KEY

# urlencode percent-encodes everything but RFC 3986 unreserved characters (ASCII input).
urlencode() {
	local s=$1 out='' c i
	for ((i = 0; i < ${#s}; i++)); do
		c=${s:i:1}
		case $c in
		[A-Za-z0-9._~-]) out+=$c ;;
		*) printf -v c '%%%02X' "'$c"; out+=$c ;;
		esac
	done
	printf '%s' "$out"
}

# call METHOD URL [JSON body] [curl args...]: sets STATUS to the answer's HTTP
# status and BODY to its body. It fails only when curl cannot reach the server.
# (It sets variables rather than printing: a $(call ...) subshell would lose STATUS.)
STATUS='' BODY=''
call() {
	local method=$1 url=$2 body=${3-} out
	local args=(-sS -X "$method" -w '\n%{http_code}' "${@:4}")
	if [[ -n $body ]]; then
		args+=(-H 'Content-Type: application/json' --data "$body")
	fi
	out=$(curl "${args[@]}" "$url") || fail "$method ${url%%\?*}: no answer"
	STATUS=${out##*$'\n'}
	BODY=${out%$'\n'*}
}

# admin METHOD PATH BODY: an admin API call on the first ingress. The key goes in
# a header read from a file descriptor, so that it does not show in ps.
admin() {
	call "$1" "http://127.0.0.1:${PORTS[0]}$2" "$3" -H @<(printf 'Authorization: Bearer %s\n' "$AGENTBUS_ADMIN_KEY")
}

# jsonfield NAME: the string value of "NAME" in the JSON on stdin (flat values
# without escapes, such as ids and keys, which is all this script reads).
jsonfield() { sed -n 's/.*"'"$1"'"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p' | head -n 1; }

finish() {
	local rc=$?
	if ((rc != 0)); then
		printf 'smoke: failed (exit %d); state and recent logs:\n' "$rc" >&2
		docker compose ps >&2 || true
		docker compose logs --no-color --tail 20 >&2 || true
	fi
	if [[ ${KEEP:-0} == 1 ]]; then
		say "KEEP=1: the stack stays up (docker compose down to stop it)"
	else
		say "stopping the stack (docker compose down; the NATS volumes stay)"
		docker compose down || true
	fi
	exit "$rc"
}
trap finish EXIT

say "building and starting; --wait returns once every service's health check passes"
docker compose up -d --build --wait

say "creating tenant $TENANT and a tenant-admin key"
admin POST /api/v1/admin/tenants "{\"id\":\"$TENANT\"}"
case $STATUS in
201) ;;
409) say "tenant $TENANT exists already (the volumes of an earlier run); using it" ;;
*) fail "creating tenant: $STATUS $BODY" ;;
esac
admin POST "/api/v1/admin/tenants/$TENANT/keys" '{"name":"smoke","role":"tenant-admin"}'
[[ $STATUS == 201 ]] || fail "creating key: $STATUS $BODY"
KEY=$(jsonfield key <<<"$BODY")
[[ -n $KEY ]] || fail "no key in the answer to creating a key (status $STATUS)"
APIKEY=$(urlencode "$KEY")

for port in "${PORTS[@]}"; do
	call POST "http://127.0.0.1:$port/api/user/webhooks/Echo/echo?apikey=$APIKEY&smoke=$port" '{"ping":1}'
	[[ $STATUS == 200 && $BODY == *'"params"'* ]] || fail "Echo echo via port $port: $STATUS $BODY"
	say "Echo echo via ingress on port $port: $STATUS $BODY"
done

say "asking $ACTIVATIONS activations which host serves them"
hosts=()
for ((i = 1; i <= ACTIVATIONS; i++)); do
	port=${PORTS[i % ${#PORTS[@]}]}
	wf=$(urlencode "$TENANT:Echo:Supervisor Workflow:a$i")
	call POST "http://127.0.0.1:$port/api/user/webhooks/$wf/host?apikey=$APIKEY"
	[[ $STATUS == 200 ]] || fail "host of activation a$i via port $port: $STATUS $BODY"
	host=$(jsonfield hostId <<<"$BODY")
	[[ -n $host ]] || fail "no hostId in the answer for a$i: $BODY"
	hosts+=("$host")
done
printf '%s\n' "${hosts[@]}" | sort | uniq -c | sed 's/^/smoke:   /'
distinct=$(printf '%s\n' "${hosts[@]}" | sort -u | wc -l | tr -d ' ')
say "$distinct distinct hostId values answered $ACTIVATIONS activations ($HOSTS hosts run)"
((distinct >= 2)) || fail "one host served every activation: the hosts do not share the partitions"
((distinct == HOSTS)) || say "note: not every host answered; the division may still have been settling"

docker compose ps
say "passed"
