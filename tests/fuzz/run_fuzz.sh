#!/usr/bin/env bash
# Builds the libFuzzer targets of the checkpoint parsers, response_format schemas, regexes,
# GBNF grammars, the bounded JSON parser of requests, the request parsers (chat,
# completions, responses, messages, batch lines, gRPC GenerateRequest messages) and the image
# decoders and data: URLs
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
# Seconds one input may take before libFuzzer calls it a hang. The largest seed automaton (the
# regex repeat_classes: 23,443 DFA states, 0.09 s optimised) takes ~10 s in an -O0 ASan build,
# so the test command's -O0 smoke run passes a larger limit (tests/CMakeLists.txt).
unit_timeout=${STRATA_FUZZ_UNIT_TIMEOUT:-10}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cxx=${STRATA_FUZZ_CXX:-clang++}

generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
echo "== configuring fuzz build in $build_dir"
cmake -S "$here" -B "$build_dir" "${generator[@]}" -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-DNDEBUG \
  -DSTRATA_FUZZ_OPT="${STRATA_FUZZ_OPT:--O1}" >"$build_dir/configure.log" 2>&1 ||
  { cat "$build_dir/configure.log"; exit 1; }
targets=(safetensors config json_schema regex gbnf json_limits chat_request completion_request
         responses_request messages_request batch_line grpc_generate image_decode data_url)
echo "== building ${targets[*]/%/_fuzz}"
cmake --build "$build_dir" -j 2 >"$build_dir/build.log" 2>&1 ||
  { cat "$build_dir/build.log"; exit 1; }

# ---- seed corpus ------------------------------------------------------------------------------
seeds=$build_dir/seeds
rm -rf "$seeds"
for target in "${targets[@]}"; do mkdir -p "$seeds/$target"; done
mkdir -p "$build_dir/artifacts"

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
# A counted repetition of alternatives with near-universal classes (a big search automaton).
printf '%s\0%s' '(?:g|bc[^d\sc(2{,]]ab|c[bc^d\S]){24}x?$' 'abcez' >"$seeds/regex/repeat_classes"

# Grammar, NUL, text.
printf '%s\0%s' 'root ::= item ("," ws item){0,3}
item ::= "(" root? ")" | [a-c]+ | [^\x00-\x7F]
ws ::= [ \t\n]*  # comment' '(ab), \xc3\xa9,c' >"$seeds/gbnf/nested"
printf '%s\0%s' 'root ::= "SELECT " name (", " name)* " FROM " name ";"
name ::= [a-z_] [a-z0-9_]{0,15}' 'SELECT a, b_2 FROM t;' >"$seeds/gbnf/sql"

# JSON texts: duplicate keys, nesting, numbers at the edges.
printf '%s' '{"b": [1, -2.5e3, 18446744073709551615, null, true], "a": {"x": "\u00e9"}, "b": {}}' \
  >"$seeds/json_limits/mixed"
printf '%s' '[[[[[[[[1]]]]]]]]' >"$seeds/json_limits/deep"
printf '%s' '{"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9,"k1":[0]}' \
  >"$seeds/json_limits/wide"

# Request bodies, one endpoint each (and the same as batch lines).
chat='{"model": "m", "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": [{"type": "text", "text": "hi"}]}, {"role": "assistant", "tool_calls": [{"id": "c0", "type": "function", "function": {"name": "f", "arguments": "{\"a\": [1]}"}}]}, {"role": "tool", "tool_call_id": "c0", "content": "ok"}], "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}}}}}}], "tool_choice": "auto", "temperature": 0.7, "top_p": 0.9, "max_tokens": 16, "n": 2, "stop": ["x"], "logit_bias": {"5": -100}, "logprobs": true, "top_logprobs": 2, "chat_template_kwargs": {"thinking": true}, "stream": true, "stream_options": {"include_usage": true}}'
printf '%s' "$chat" >"$seeds/chat_request/tools"
printf '%s' '{"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "properties": {"n": {"enum": [1, "a"]}}, "required": ["n"]}}}, "guided_regex": null, "seed": 3}' \
  >"$seeds/chat_request/schema"
printf '%s' '{"messages": [{"role": "user", "content": "hi"}], "guided_grammar": "root ::= [a-z]+", "min_tokens": 0, "allowed_token_ids": [1, 2]}' \
  >"$seeds/chat_request/grammar"
printf '%s' '{"model": "m", "prompt": ["a", "b"], "max_tokens": 4, "echo": true, "logprobs": 2, "stop_token_ids": [3], "guided_choice": ["yes", "no"], "truncate_prompt_tokens": 8}' \
  >"$seeds/completion_request/text"
printf '%s' '{"prompt": [[1, 2, 3], [4]], "max_tokens": 0, "echo": true, "prompt_logprobs": 1, "bad_words": ["x"], "structured_outputs": {"regex": "[0-9]+"}}' \
  >"$seeds/completion_request/ids"
printf '%s' '{"model": "m", "instructions": "be brief", "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}, {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}, {"type": "function_call_output", "call_id": "c", "output": "ok"}], "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}], "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}}, "max_output_tokens": 16, "metadata": {"k": "v"}, "reasoning": {"effort": "low"}, "store": false}' \
  >"$seeds/responses_request/items"
printf '%s' '{"input": "hi", "stream": true, "include": ["message.output_text.logprobs"], "top_logprobs": 2}' \
  >"$seeds/responses_request/text"
printf '%s' '{"model": "m", "max_tokens": 16, "system": [{"type": "text", "text": "s"}], "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}, {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {"a": 1}}]}, {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "ok"}]}], "tools": [{"name": "f", "input_schema": {"type": "object"}}], "tool_choice": {"type": "auto"}, "stop_sequences": ["x"], "thinking": {"type": "enabled", "budget_tokens": 1024}}' \
  >"$seeds/messages_request/tools"
printf '%s' "{\"custom_id\": \"r1\", \"method\": \"POST\", \"url\": \"/v1/chat/completions\", \"body\": $chat}" \
  >"$seeds/batch_line/chat"
printf '%s' '{"custom_id": "r2", "method": "POST", "url": "/v1/completions", "body": {"prompt": "a", "max_tokens": 2}}' \
  >"$seeds/batch_line/completion"
printf '%s' '{"id": "batch_req_x0", "custom_id": "r1", "response": {"status_code": 200, "request_id": "r", "body": {"id": "r"}}, "error": null}' \
  >"$seeds/batch_line/output"
# GenerateRequest messages, encoded from text format by protoc (when it is installed).
if command -v protoc >/dev/null 2>&1; then
  encode() {
    protoc --encode=strata.v1.GenerateRequest -I"$here/../../proto" \
      "$here/../../proto/strata/v1/inference.proto" >"$seeds/grpc_generate/$1"
  }
  encode text <<'TXT' || true
text: "hi" max_tokens: 8 stop: "x" n: 2 logprobs: 1
sampling { temperature: 0.5 top_p: 0.9 top_k: 5 seed: 7 logit_bias { key: 5 value: -100 } logit_bias { key: 6 value: 3 } }
json_schema: "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}}}"
TXT
  encode ids <<'TXT' || true
token_ids { ids: 1 ids: 2 ids: 3 } max_tokens: 1 regex: "[a-z]{2,4}" allowed_token_ids: 1 bad_words: "no"
TXT
  encode grammar <<'TXT' || true
text: "x" grammar: "root ::= \"a\" | \"b\"" request_id: "r" priority: 1 ignore_eos: true
TXT
fi

# Small images of every format and variant (Pillow, in Debian's python3: tools/setup.sh installs
# python3-pil), and data: URLs of some of them.
if /usr/bin/python3 -c 'import PIL' 2>/dev/null; then
  /usr/bin/python3 - "$seeds/image_decode" "$seeds/data_url" <<'PY'
import base64, io, sys
from PIL import Image
images, urls = sys.argv[1], sys.argv[2]
rgb = Image.new("RGB", (19, 11))
rgb.putdata([(x * 13 % 256, y * 23 % 256, (x * y) % 256) for y in range(11) for x in range(19)])
rgba = rgb.convert("RGBA")
rgba.putalpha(Image.linear_gradient("L").resize((19, 11)))
palette = rgb.convert("P", palette=Image.ADAPTIVE, colors=8)
variants = {
    "rgb.png": (rgb, {}), "rgba.png": (rgba, {}), "palette.png": (palette, {"transparency": 2}),
    "gray.png": (rgb.convert("L"), {}), "rgb.jpg": (rgb, {"quality": 80}),
    "progressive.jpg": (rgb, {"progressive": True}), "gray.jpg": (rgb.convert("L"), {}),
    "cmyk.jpg": (rgb.convert("CMYK"), {}), "lossless.webp": (rgba, {"lossless": True}),
    "lossy.webp": (rgb, {"quality": 50}), "palette.gif": (palette, {"transparency": 1}),
}
for name, (image, options) in variants.items():
    out = io.BytesIO()
    image.save(out, format={"jpg": "JPEG"}.get(name.split(".")[1], name.split(".")[1].upper()),
               **options)
    with open(f"{images}/{name}", "wb") as f:
        f.write(out.getvalue())
    if name in ("rgb.png", "palette.gif", "rgb.jpg"):
        with open(f"{urls}/{name}", "w") as f:
            f.write(f"data:image/{name.split('.')[1]};base64," +
                    base64.b64encode(out.getvalue()).decode())
PY
fi
printf 'data:image/png;name=a.png;base64,iVBORw0K\r\nGgo=' >"$seeds/data_url/wrapped"
printf 'data:text/plain,hello' >"$seeds/data_url/not_base64"

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

cat >"$build_dir/json_limits.dict" <<'DICT'
"{"
"}"
"["
"]"
"\":"
","
"null"
"true"
"1e999"
"-0.5"
"\\u00e9"
"\\ud83d\\ude00"
DICT

# The request bodies' field names and values.
cat >"$build_dir/request.dict" <<'DICT'
"\"messages\""
"\"role\""
"\"user\""
"\"assistant\""
"\"tool\""
"\"content\""
"\"type\""
"\"text\""
"\"tools\""
"\"function\""
"\"name\""
"\"parameters\""
"\"arguments\""
"\"tool_calls\""
"\"tool_choice\""
"\"required\""
"\"prompt\""
"\"input\""
"\"instructions\""
"\"max_tokens\""
"\"max_output_tokens\""
"\"temperature\""
"\"logit_bias\""
"\"logprobs\""
"\"top_logprobs\""
"\"response_format\""
"\"json_schema\""
"\"schema\""
"\"guided_json\""
"\"guided_regex\""
"\"guided_grammar\""
"\"guided_choice\""
"\"structured_outputs\""
"\"chat_template_kwargs\""
"\"stream\""
"\"stop\""
"\"echo\""
"\"n\""
"\"metadata\""
"\"tool_use\""
"\"tool_result\""
"\"input_schema\""
"\"function_call\""
"\"function_call_output\""
"\"custom_id\""
"\"url\""
"\"body\""
"\"/v1/chat/completions\""
"\"/v1/responses\""
DICT
cat >"$build_dir/image_decode.dict" <<'DICT'
"\x89PNG\x0d\x0a\x1a\x0a"
"IHDR"
"PLTE"
"tRNS"
"IDAT"
"IEND"
"acTL"
"\xff\xd8\xff"
"\xff\xc0"
"\xff\xc2"
"\xff\xc4"
"\xff\xda"
"\xff\xd9"
"Adobe"
"RIFF"
"WEBP"
"VP8 "
"VP8L"
"VP8X"
"ALPH"
"ANIM"
"ANMF"
"GIF89a"
"\x21\xf9\x04"
"NETSCAPE2.0"
DICT
cat >"$build_dir/data_url.dict" <<'DICT'
"data:"
";base64,"
"image/png"
"image/jpeg"
"=="
"\x0d\x0a"
"iVBORw0KGgo"
"/9j/"
"R0lGODlh"
"UklGR"
DICT

for target in chat_request completion_request responses_request messages_request batch_line; do
  cp "$build_dir/request.dict" "$build_dir/$target.dict"
done
# Proto field names mean nothing on the wire: the JSON a json_schema field carries does.
cp "$build_dir/json_schema.dict" "$build_dir/grpc_generate.dict"

# ---- run --------------------------------------------------------------------------------------
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
for target in "${targets[@]}"; do
  binary=$build_dir/${target}_fuzz
  corpus=$build_dir/corpus/$target
  log=$build_dir/${target}_fuzz.log
  mkdir -p "$corpus"
  echo "== running ${target}_fuzz for ${seconds}s"
  if "$binary" "$corpus" "$seeds/$target" -max_total_time="$seconds" -timeout="$unit_timeout" \
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
