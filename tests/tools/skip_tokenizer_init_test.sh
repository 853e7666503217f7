#!/usr/bin/env bash
# A checkpoint that ships no tokenizer: `strata serve` refuses it naming the missing file and
# --skip-tokenizer-init; with the flag it serves token-id prompts (the output's token ids, empty
# text) and answers a text prompt and a chat with a 400 naming the flag.
# Usage: skip_tokenizer_init_test.sh STRATA STRATA_MAKE_CHECKPOINT
set -euo pipefail
strata=$1
make_checkpoint=$2
work=$(mktemp -d)
server_pid=
cleanup() {
  if [[ -n "$server_pid" ]]; then kill "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  [[ -f "$work/serve.out" ]] && cat "$work/serve.out" "$work/serve.err"
  exit 1
}

"$make_checkpoint" --preset tiny --demo-tokenizer --out "$work/m" > /dev/null
rm "$work/m/tiktoken.model" "$work/m/tokenizer_config.json"
rm -f "$work/m/chat_template.jinja"

serve_flags=(--model "$work/m" --host 127.0.0.1 --port 0 --grpc-port 0
             --kv-cache-memory 64MiB --log-level warn)

# Without the flag: refused at start, naming the missing file and the flag.
if "$strata" serve "${serve_flags[@]}" > "$work/refused.out" 2>&1; then
  fail "serve started on a checkpoint without a tokenizer"
fi
grep -q "tiktoken.model is missing" "$work/refused.out" || fail "$(cat "$work/refused.out")"
grep -q -- "--skip-tokenizer-init" "$work/refused.out" || fail "$(cat "$work/refused.out")"

# With it: served.
"$strata" serve "${serve_flags[@]}" --skip-tokenizer-init > "$work/serve.out" \
  2> "$work/serve.err" &
server_pid=$!
port=
for _ in $(seq 1 600); do
  port=$(sed -n 's|.* on http://127\.0\.0\.1:\([0-9]*\) .*|\1|p' "$work/serve.out" | head -n 1)
  if [[ -n "$port" ]] && curl -sf "http://127.0.0.1:$port/ready" > /dev/null; then break; fi
  kill -0 "$server_pid" 2> /dev/null || fail "serve exited"
  sleep 0.1
done
[[ -n "$port" ]] || fail "serve did not start"
url="http://127.0.0.1:$port"

post() {  # post PATH BODY: prints "STATUS BODY"
  curl -s -o "$work/body" -w '%{http_code}' -H 'content-type: application/json' -d "$2" \
    "$url$1" > "$work/status"
  echo "$(cat "$work/status") $(cat "$work/body")"
}

reply=$(post /v1/completions '{"prompt": [1, 2, 3], "max_tokens": 4, "temperature": 0}')
python3 - "$reply" << 'EOF' || fail "completion: $reply"
import json, sys
status, body = sys.argv[1].split(" ", 1)
assert status == "200", status
choice = json.loads(body)["choices"][0]
assert choice["text"] == "", choice
assert choice["prompt_token_ids"] == [1, 2, 3], choice
assert 1 <= len(choice["token_ids"]) <= 4 and all(isinstance(i, int) for i in choice["token_ids"])
EOF

for case in '/v1/completions {"prompt":"hello"} prompt' \
            '/v1/chat/completions {"messages":[{"role":"user","content":"hi"}]} messages'; do
  read -r path body param <<< "$case"  # (bodies without spaces)
  reply=$(post "$path" "$body")
  python3 - "$reply" "$param" << 'EOF' || fail "$path: $reply"
import json, sys
status, body = sys.argv[1].split(" ", 1)
assert status == "400", status
error = json.loads(body)["error"]
assert error["param"] == sys.argv[2], error
assert "--skip-tokenizer-init" in error["message"], error
EOF
done

kill "$server_pid"
wait "$server_pid" || true
server_pid=
echo "ok: a tokenizer-less checkpoint is refused without the flag and served with it"
