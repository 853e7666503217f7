#!/usr/bin/env bash
# Golden check of the whole model against an independent float64 implementation
# (kimi_reference.py, written from docs/model.md and docs/checkpoint.md only):
#   for each checkpoint variant: `strata logits` over a prompt of a few hundred ids must match
#   the reference's logits within 2e-3 (max abs), and `strata generate` (greedy, 16 tokens)
#   must equal the reference's greedy continuation.
# usage: run_golden.sh STRATA_BIN MAKE_CHECKPOINT_BIN WORK_DIR
set -euo pipefail
strata=$1 make_ckpt=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3
rm -rf "$work" && mkdir -p "$work"

variants=(
  "k3_tiny|--family k3 --preset tiny --seed 11"
  "k3_sharded_mxfp4|--family k3 --preset tiny --seed 12 --shards 3 --mxfp4"
  "k3_groups_noqlora|--family k3 --preset tiny --seed 13 --set groups=4 --set topk_group=2 --set q_lora=0 --set hidden=80 --set kda_heads=3"
  "k3_layers7_block3|--family k3 --preset tiny --seed 14 --set layers=7 --set attn_res_block=3"
  "kl_tiny|--family kimi-linear --preset tiny --seed 21"
  "kl_tied_dense2|--family kimi-linear --preset tiny --seed 23 --set tie_embeddings=true --set first_dense=2 --set kda_head_dim=16 --set kda_heads=3"
  "kl_sharded_groups|--family kimi-linear --preset tiny --seed 22 --shards 2 --set groups=2 --set topk_group=1 --set layers=5"
)
failed=0
for entry in "${variants[@]}"; do
  name=${entry%%|*} args=${entry#*|}
  dir="$work/$name"
  # shellcheck disable=SC2086
  "$make_ckpt" $args --out "$dir" >/dev/null
  vocab=$($py -c "import json,sys; c=json.load(open('$dir/config.json')); print(c.get('text_config', c)['vocab_size'])")
  $py -c "import json,random; r=random.Random(7); json.dump([r.randrange($vocab) for _ in range(300)], open('$dir/ids.json','w'))"
  prompt=$($py -c "import json; print(','.join(map(str, json.load(open('$dir/ids.json')))))")
  "$strata" logits --model "$dir" --ids-file "$dir/ids.json" --out "$dir/strata.npy" --prefill-chunk 96 --log-level warn
  "$strata" generate --model "$dir" --prompt-ids "$prompt" --max-tokens 16 --ignore-eos --log-level warn > "$dir/strata_greedy.json"
  $py "$here/kimi_reference.py" --model "$dir" --ids-file "$dir/ids.json" --out "$dir/ref.npy" --greedy 16 > "$dir/ref_greedy.json"
  if $py "$here/compare_npy.py" "$dir/strata.npy" "$dir/ref.npy" --atol 2e-3; then :; else
    echo "FAIL $name: logits differ"; failed=1
  fi
  s=$(tail -n 1 "$dir/strata_greedy.json" | tr -d ' \n') r=$(tail -n 1 "$dir/ref_greedy.json" | tr -d ' \n')
  if [ "$s" != "$r" ]; then
    echo "FAIL $name: greedy continuation strata=$s reference=$r"; failed=1
  else
    echo "ok   $name: greedy $s"
  fi
done
exit $failed
