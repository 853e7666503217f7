#!/usr/bin/env bash
# Builds the libFuzzer targets of the checkpoint parsers, response_format schemas, regexes and
# GBNF grammars
# (clang++, ASan + UBSan) into BUILD_DIR
# as a separate small project (tests/fuzz/CMakeLists.txt), writes a seed corpus, and runs each
# target for SECONDS seconds. Exits non-zero when a target crashes or reports a sanitizer error;
# the reproducer is left in BUILD_DIR/artifacts/.
#
#   tests/fuzz/run_fuzz.sh build/fuzz 60
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 BUILD_DIR SECONDS" >&2
  exit 2
fi
build_dir=$(mkdir -p "$1" && cd "$1" && pwd)
seconds=$2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cxx=${STRATA_FUZZ_CXX:-clang++}

generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
echo "== configuring fuzz build in $build_dir"
cmake -S "$here" -B "$build_dir" "${generator[@]}" -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$build_dir/configure.log" 2>&1 ||
  { cat "$build_dir/configure.log"; exit 1; }
echo "== building safetensors_fuzz config_fuzz json_schema_fuzz regex_fuzz gbnf_fuzz"
cmake --build "$build_dir" -j 2 >"$build_dir/build.log" 2>&1 ||
  { cat "$build_dir/build.log"; exit 1; }

# ---- seed corpus ------------------------------------------------------------------------------
seeds=$build_dir/seeds
rm -rf "$seeds"
mkdir -p "$seeds/safetensors" "$seeds/config" "$seeds/json_schema" "$seeds/regex" "$seeds/gbnf" \
  "$build_dir/artifacts"

# A valid two-tensor file with metadata, and a minimal one, written like the reference writer.
python3 - "$seeds/safetensors" <<'PY'
import json, struct, sys
def write(path, tensors, metadata=None):
    header, data = {}, b""
    if metadata:
        header["__metadata__"] = metadata
    for name, dtype, shape, payload in tensors:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(payload)]}
        data += payload
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)
out = sys.argv[1]
write(out + "/two_tensors", [("model.norm.weight", "F32", [2], struct.pack("<2f", 1.0, -2.0)),
                             ("model.embed_tokens.weight", "BF16", [2, 2], bytes(range(8)))],
      {"format": "pt"})
write(out + "/empty_and_u8", [("e", "F32", [0], b""), ("q", "U8", [1, 4], b"\x01\x02\x03\x04")])
write(out + "/no_tensors", [])
PY

cat >"$seeds/config/kimi_linear.json" <<'JSON'
{"model_type": "kimi_linear", "vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 4,
 "rms_norm_eps": 1e-05, "head_dim": 72,
 "linear_attn_config": {"kda_layers": [1, 2, 3], "full_attn_layers": [4], "num_heads": 2,
                        "head_dim": 16, "short_conv_kernel_size": 4},
 "num_attention_heads": 2, "num_key_value_heads": 2, "q_lora_rank": null, "kv_lora_rank": 16,
 "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16, "mla_use_nope": true,
 "intermediate_size": 64, "first_k_dense_replace": 1, "moe_layer_freq": 1,
 "num_experts": 8, "num_experts_per_token": 2, "num_shared_experts": 1,
 "moe_intermediate_size": 32, "moe_renormalize": true, "moe_router_activation_func": "sigmoid",
 "routed_scaling_factor": 2.446, "num_expert_group": 1, "topk_group": 1,
 "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 3,
 "tie_word_embeddings": false, "model_max_length": 1048576}
JSON
cat >"$seeds/config/kimi_k3.json" <<'JSON'
{"model_type": "kimi_k3", "bos_token_id": 1, "eos_token_id": [2, 5],
 "quantization_config": {"quant_method": "compressed-tensors", "format": "mxfp4-pack-quantized",
   "config_groups": {"group_0": {"format": "mxfp4-pack-quantized", "targets": ["Linear"]}}},
 "text_config": {"vocab_size": 64, "hidden_size": 64, "num_hidden_layers": 3,
   "rms_norm_eps": 1e-05,
   "linear_attn_config": {"kda_layers": [1, 2], "full_attn_layers": [3], "num_heads": 2,
     "head_dim": 16, "short_conv_kernel_size": 4, "gate_lower_bound": -5.0,
     "use_full_rank_gate": true},
   "num_attention_heads": 2, "q_lora_rank": 32, "kv_lora_rank": 16, "qk_nope_head_dim": 16,
   "qk_rope_head_dim": 8, "v_head_dim": 16, "mla_use_nope": true, "mla_use_output_gate": true,
   "intermediate_size": 96, "first_k_dense_replace": 1, "moe_layer_freq": 1,
   "num_experts": 8, "num_experts_per_token": 2, "num_shared_experts": 2,
   "moe_intermediate_size": 32, "num_expert_group": 2, "topk_group": 1,
   "hidden_act": "situ", "activation_situ_beta": 4.0, "activation_situ_linear_beta": 25.0,
   "routed_expert_hidden_size": 32, "latent_moe_use_norm": true, "attn_res_block_size": 2}}
JSON

# Schema, NUL, document.
printf '%s\0%s' '{"type":"object","properties":{"a":{"type":"integer"},"b":{"enum":["x",1]},"c":{"type":"array","items":{"$ref":"#/$defs/n"},"maxItems":2}},"required":["a"],"additionalProperties":false,"$defs":{"n":{"anyOf":[{"type":"null"},{"type":"string","maxLength":3}]}}}' \
  '{"a": -12, "b": "x", "c": [null, "\u00e9t"]}' >"$seeds/json_schema/person"
printf '%s\0%s' '{}' '[1.5e3, {"k": true}]' >"$seeds/json_schema/any"
printf '%s\0%s' '{"type":"array","prefixItems":[{"type":"boolean"},{"enum":[1,10]}]}' \
  '[true, 10, "x"]' >"$seeds/json_schema/tuple"
printf '%s\0%s' '{"type":"object","properties":{"id":{"type":"string","pattern":"^[a-z]{2}\\d+$","maxLength":6},"d":{"type":"string","format":"date"},"x":{"type":"number","minimum":-1.5,"exclusiveMaximum":2}}}' \
  '{"id": "ab12", "d": "2026-11-30", "x": -0.25}' >"$seeds/json_schema/checked"
# Pattern, NUL, text.
printf '%s\0%s' '^(ab|c[^d\s]){2,3}x?$' 'abcez' >"$seeds/regex/groups"
{ printf '%s\0' '[\u00e9-\u{1F600}]+\.\d{2}|(?:q|r)*'; printf '\xc3\xa9\xf0\x9f\x98\x80.12'; } \
  >"$seeds/regex/unicode"

# Grammar, NUL, text.
printf '%s\0%s' 'root ::= item ("," ws item){0,3}
item ::= "(" root? ")" | [a-c]+ | [^\x00-\x7F]
ws ::= [ \t\n]*  # comment' '(ab), \xc3\xa9,c' >"$seeds/gbnf/nested"
printf '%s\0%s' 'root ::= "SELECT " name (", " name)* " FROM " name ";"
name ::= [a-z_] [a-z0-9_]{0,15}' 'SELECT a, b_2 FROM t;' >"$seeds/gbnf/sql"

# Dictionaries: the tokens a mutator would otherwise have to discover byte by byte.
cat >"$build_dir/safetensors.dict" <<'DICT'
"\"dtype\""
"\"shape\""
"\"data_offsets\""
"\"__metadata__\""
"\"F32\""
"\"BF16\""
"\"U8\""
"\"F8_E4M3\""
"\"I64\""
DICT
cat >"$build_dir/config.dict" <<'DICT'
"\"model_type\""
"\"kimi_k3\""
"\"kimi_linear\""
"\"text_config\""
"\"linear_attn_config\""
"\"kda_layers\""
"\"full_attn_layers\""
"\"quantization_config\""
"\"mxfp4-pack-quantized\""
"\"compressed-tensors\""
"\"num_expert_group\""
"\"topk_group\""
"\"num_experts_per_token\""
"\"hidden_act\""
"\"situ\""
"null"
"true"
"false"
DICT

cat >"$build_dir/json_schema.dict" <<'DICT'
"\"type\""
"\"object\""
"\"array\""
"\"string\""
"\"integer\""
"\"properties\""
"\"required\""
"\"items\""
"\"prefixItems\""
"\"enum\""
"\"anyOf\""
"\"$ref\""
"\"#/$defs/\""
"\"maxLength\""
"\"additionalProperties\""
"\\u00"
"\x00"
"\"pattern\""
"\"format\""
"\"minimum\""
"\"exclusiveMaximum\""
DICT
cat >"$build_dir/regex.dict" <<'DICT'
"(?:"
"[^"
"\\d"
"\\s"
"\\w"
"\\u{"
"{2,5}"
"|"
"*"
"\xc3\xa9"
DICT

cat >"$build_dir/gbnf.dict" <<'DICT'
"::="
"root"
"|"
"[^"
"\\x"
"\\u"
"{1,3}"
"*"
"+"
"?"
"\x0a"
"\xc3\xa9"
DICT

# ---- run --------------------------------------------------------------------------------------
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
for target in safetensors config json_schema regex gbnf; do
  binary=$build_dir/${target}_fuzz
  corpus=$build_dir/corpus/$target
  log=$build_dir/${target}_fuzz.log
  mkdir -p "$corpus"
  echo "== running ${target}_fuzz for ${seconds}s"
  if "$binary" "$corpus" "$seeds/$target" -max_total_time="$seconds" -timeout=10 \
      -rss_limit_mb=2048 -dict="$build_dir/$target.dict" -print_final_stats=1 \
      -artifact_prefix="$build_dir/artifacts/${target}-" >"$log" 2>&1; then
    grep -E "DONE|stat::number_of_executed_units|stat::average_exec_per_sec" "$log" || true
  else
    status=1
    echo "!! ${target}_fuzz FAILED; last lines of $log:" >&2
    tail -n 60 "$log" >&2
  fi
done
exit $status
