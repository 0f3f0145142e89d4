#!/usr/bin/env bash
# Drive a running gateway with guidellm and aiperf, each with its own default request
# shapes (streaming chat; guidellm also sends ignore_eos and continuous usage stats).
#   LOAD_URL (http://127.0.0.1:8000)  LOAD_MODE (auto: the x-spec-mode header sent)
#   LOAD_REQUESTS (20)  LOAD_CONCURRENCY (4)  LOAD_PROMPT_TOKENS (128)  LOAD_OUTPUT_TOKENS (64)
#   LOAD_TOKENIZER (the embedded model's directory)  LOAD_API_KEY (when api_keys are set)
#   LOAD_TOOLS ("guidellm aiperf")  LOAD_OUT (bench/out/load)  LOAD_VENV (.venv-load)
set -euo pipefail
VENV="${LOAD_VENV:-.venv-load}"
URL="${LOAD_URL:-http://127.0.0.1:8000}"
MODE="${LOAD_MODE:-auto}"
REQUESTS="${LOAD_REQUESTS:-20}"
CONCURRENCY="${LOAD_CONCURRENCY:-4}"
PROMPT_TOKENS="${LOAD_PROMPT_TOKENS:-128}"
OUTPUT_TOKENS="${LOAD_OUTPUT_TOKENS:-64}"
TOKENIZER="${LOAD_TOKENIZER:-${SPECGATE_CACHE_DIR:-$HOME/.cache/specgate}/SmolLM2-135M-Instruct}"
TOOLS="${LOAD_TOOLS:-guidellm aiperf}"
OUT="${LOAD_OUT:-bench/out/load}"
# The tokenizer is a local directory: neither tool needs a model hub. (guidellm runs with
# HF_HUB_OFFLINE=1; aiperf 0.13 must not: offline, it looks a local path up as a hub repo.)

MODEL="$("$VENV/bin/python" - "$URL" "${LOAD_API_KEY:-}" <<'EOF'
import json, sys, urllib.request
url, key = sys.argv[1], sys.argv[2]
request = urllib.request.Request(f"{url}/v1/models",
                                 headers={"Authorization": f"Bearer {key}"} if key else {})
print(json.load(urllib.request.urlopen(request, timeout=10))["data"][0]["id"])
EOF
)"
mkdir -p "$OUT"
echo "==> $URL serves '$MODEL'; x-spec-mode: $MODE; $REQUESTS requests at concurrency $CONCURRENCY"

for tool in $TOOLS; do
  case "$tool" in
    guidellm)
      # Headers ride in the backend's request extras (extras.headers.<name>=<value>).
      backend="kind=openai_http,target=$URL,model=$MODEL,extras.headers.x-spec-mode=$MODE"
      [ -n "${LOAD_API_KEY:-}" ] && backend="$backend,api_key=$LOAD_API_KEY"
      HF_HUB_OFFLINE=1 "$VENV/bin/guidellm" run --backend "$backend" \
        --profile "kind=concurrent,streams=$CONCURRENCY" \
        --constraint "kind=max_requests,count=$REQUESTS" \
        --data "kind=synthetic_text,prompt_tokens=$PROMPT_TOKENS,output_tokens=$OUTPUT_TOKENS" \
        --tokenizer "kind=huggingface_auto,model=$TOKENIZER" \
        --output "kind=json,path=$OUT/guidellm.json" --disable-console-interactive ;;
    aiperf)
      key=()
      [ -n "${LOAD_API_KEY:-}" ] && key=(--api-key "$LOAD_API_KEY")
      env -u HF_HUB_OFFLINE -u TRANSFORMERS_OFFLINE "$VENV/bin/aiperf" profile --model "$MODEL" --url "$URL" --endpoint-type chat \
        --streaming --tokenizer "$TOKENIZER" --header "x-spec-mode:$MODE" "${key[@]}" \
        --request-count "$REQUESTS" --concurrency "$CONCURRENCY" \
        --isl "$PROMPT_TOKENS" --osl "$OUTPUT_TOKENS" --extra-inputs ignore_eos:true \
        --output-artifact-dir "$OUT/aiperf" --ui none ;;
    *) echo "unknown load tool '$tool' (guidellm, aiperf)" >&2; exit 2 ;;
  esac
done
