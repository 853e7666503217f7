#!/usr/bin/env bash
# strata-make-checkpoint --demo-tokenizer writes a checkpoint that `strata` can tokenize with
# (and so serve): the tokenizer files exist, load, and a text round-trips through them.
# Usage: demo_tokenizer_test.sh STRATA STRATA_MAKE_CHECKPOINT
set -euo pipefail
strata=$1
make_checkpoint=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$make_checkpoint" --preset tiny --demo-tokenizer --out "$work/m"
for f in tiktoken.model tokenizer_config.json config.json; do
  [[ -f "$work/m/$f" ]] || { echo "missing $f"; exit 1; }
done
printf 'hello world, strata' > "$work/text.txt"
ids=$("$strata" tokenize --model "$work/m" --text-file "$work/text.txt" | tr -d '[] \n')
[[ -n "$ids" ]] || { echo "no ids"; exit 1; }
text=$("$strata" detokenize --model "$work/m" --ids "$ids")
if [[ "$text" != 'hello world, strata' ]]; then
  echo "round trip gave '$text'"
  exit 1
fi
echo "ok: ids $ids"
