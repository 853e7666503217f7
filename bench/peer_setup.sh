# Sourced by the llama.cpp comparisons (peer_compare.sh, peer_serve_compare.sh): their common
# arguments, and one checkpoint in two formats and the peer's runtime, made once in a scratch
# directory.
#
#   peer_usage SCRIPT                 prints SCRIPT's leading comment block, exits 2
#   peer_dirs BUILD_DIR PEER_DIR SCRATCH
#                                     sets build, peer, scratch (absolute; SCRATCH created)
#   peer_require SCRIPT FILE...       exits 2 naming the first FILE that is missing
#   peer_setup BUILD_DIR SCRATCH
#   peer_experts bf16|mxfp4|mxfp4,int8  after peer_setup: with mxfp4, points peer_model at the
#                                     `strata quantize` output and peer_gguf at a GGUF holding the
#                                     same MXFP4 experts (gguf_mxfp4_experts.py), made once; with
#                                     mxfp4,int8 the GGUF's other matrices are Q8_0 holding
#                                     Strata's int8 codes, and strata_quantization=int8 (the flag
#                                     Strata then loads with; else none)
#
# Sets: peer_model (official-layout checkpoint: the `bench` preset of strata-make-checkpoint,
# Kimi-Linear shape, 0.74B parameters, bf16, with the demo tokenizer so `strata serve` can load
# it), peer_gguf (the same weights as a bf16 GGUF by the peer's converter, $peer/hf2gguf.py),
# nlc_version, llama_release; exports NODE_LLAMA_CPP_DIR (node-llama-cpp's prebuilt CPU llama.cpp,
# installed from the npm registry into SCRATCH on first use). Needs $peer (the peer's scripts).
peer_usage() {
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$1" >&2
  exit 2
}

peer_dirs() {
  build=$(cd "$1" && pwd)
  peer=$(cd "$2" && pwd)
  mkdir -p "$3"
  scratch=$(cd "$3" && pwd)
}

peer_require() {
  local script=$1 f
  shift
  for f in "$@"; do
    [[ -e $f ]] || { echo "$(basename "$script" .sh): missing $f" >&2; exit 2; }
  done
}

peer_setup() {
  local build=$1 scratch=$2
  nlc_version=3.22.1
  if [[ ! -d $scratch/node_modules/node-llama-cpp ]]; then
    (cd "$scratch" && { [[ -f package.json ]] || npm init -y >/dev/null; } &&
     NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm i -E "node-llama-cpp@$nlc_version" \
       --no-audit --no-fund >/dev/null)
  fi
  export NODE_LLAMA_CPP_DIR="$scratch/node_modules/node-llama-cpp"
  llama_release=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["release"])' \
    "$NODE_LLAMA_CPP_DIR/llama/binariesGithubRelease.json" 2>/dev/null || echo unknown)

  peer_model=$scratch/bench_model
  if [[ ! -f $peer_model/config.json || ! -f $peer_model/tokenizer_config.json ]]; then
    "$build/tools/strata-make-checkpoint" --preset bench --out "$peer_model" --demo-tokenizer \
      >/dev/null
  fi
  peer_gguf=$scratch/bench.gguf
  if [[ ! -f $peer_gguf || $peer_gguf -ot $peer_model/config.json ]]; then
    /usr/bin/python3 "$peer/hf2gguf.py" "$peer_model" "$peer_gguf" >/dev/null
  fi
}

peer_experts() {
  strata_quantization=none
  local int8=()
  case $1 in
    bf16) return ;;
    mxfp4) ;;
    mxfp4,int8) int8=(--int8) strata_quantization=int8 ;;
    *) echo "experts must be bf16, mxfp4 or mxfp4,int8, got '$1'" >&2; exit 2 ;;
  esac
  local quantized=$scratch/bench_model_mxfp4 gguf=$scratch/bench_${1/,/_}.gguf
  [[ -f $quantized/config.json ]] ||
    "$build/strata" quantize --model "$peer_model" --out "$quantized" --log-level warn >/dev/null
  [[ -f $gguf && ! $gguf -ot $quantized/config.json ]] ||
    /usr/bin/python3 "$(dirname "${BASH_SOURCE[0]}")/gguf_mxfp4_experts.py" "$peer" "$peer_model" \
      "$quantized" "$gguf" "${int8[@]}" >/dev/null
  peer_model=$quantized
  peer_gguf=$gguf
}
