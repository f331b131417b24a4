#!/usr/bin/env bash
# The built-in demo: text -> pretraining records -> a short pretraining -> fine-tuning -> a SavedModel
# that answers a sentence. Everything it reads is made by demo/make_demo_data.py.
# Usage: bash demo.sh ["a sentence to classify"]
# Every stage runs in float32: on a CPU without bfloat16 instructions (AVX2 only) --dtype=bfloat16
# is emulated and slower. It ends with its figures (also in demo_out/summary.md: the README's
# table), what it made, where, and what to try next.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PY:-.venv/bin/python}
OUT=${DEMO_OUT:-demo_out}
SENTENCE=${1:-"the movie was not terrible , the music was brilliant ."}
# Without a sentence the demo asks about these too: the model knows everyday reviews, not films alone.
EVERYDAY=("the food was cold and the waiter was rude ." "my new phone is fast and the battery is great .")
PRETRAIN_STEPS=${DEMO_PRETRAIN_STEPS:-1500}
EPOCHS=3
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-3}
# With a sentence and a model already exported by an earlier run: just ask it.
ASK=(demo/ask.py --export_dir="$OUT/export" --vocab_file="$OUT/data/vocab.txt"
     --label_names=negative,positive)
if [ $# -ge 1 ] && [ -d "$OUT/export" ]; then
  exec $PY "${ASK[@]}" "$SENTENCE"
fi
rm -rf "$OUT"
start=$SECONDS
trap 'echo "demo failed at the stage above: its log is under $OUT/ (*.log)" >&2' ERR
stage() { echo; echo "=== [$((SECONDS - start)) s] $*"; }
# The log lines' time stamp (or absl's prefix, with -v) off, so the figures read plainly.
plain() { sed -uE 's/^([IWE][0-9]{4} [0-9:.]+ +[0-9]+ [A-Za-z0-9_]+\.py:[0-9]+\] |[0-9]{2}:[0-9]{2}:[0-9]{2} )//'; }
# shown LOG PATTERN COMMAND...: the command's whole output into LOG, and its lines that match
# PATTERN on the terminal as they come (training logs a step line at least every 30 s).
shown() {
  local log=$1 pattern=$2
  shift 2
  "$@" 2>&1 | tee "$log" | plain | { grep --line-buffered -E "$pattern" || true; } | sed -u 's/^/  /'
}

stage "1/5 making the demo data (corpus, vocab, config, labelled set)"
$PY demo/make_demo_data.py --output_dir="$OUT/data"

stage "2/5 create_pretraining_data.py"
for part in corpus heldout; do
  $PY create_pretraining_data.py --input_file="$OUT/data/$part.txt" \
    --output_file="$OUT/$part.tfrecord" --vocab_file="$OUT/data/vocab.txt" --do_lower_case \
    --max_seq_length=64 --max_predictions_per_seq=10 --dupe_factor=4 --random_seed=12345 \
    > "$OUT/$part.log" 2>&1
  plain < "$OUT/$part.log" | grep -E "^Read " | sed "s|^|  $part: |" || true
done

stage "3/5 run_pretraining.py (a small BERT: L=2, H=128)"
shown "$OUT/pretrain.log" "^step |^First step" \
  $PY run_pretraining.py --bert_config_file="$OUT/data/bert_config.json" \
  --input_file="$OUT/corpus.tfrecord" --output_dir="$OUT/pretrain" --do_train \
  --max_seq_length=64 --max_predictions_per_seq=10 --train_batch_size=64 \
  --num_train_steps=$PRETRAIN_STEPS --num_warmup_steps=100 --learning_rate=1e-3 \
  --save_checkpoints_steps=500 --iterations_per_loop=100 --log_steps=250
$PY run_pretraining.py --bert_config_file="$OUT/data/bert_config.json" \
  --input_file="$OUT/heldout.tfrecord" --output_dir="$OUT/pretrain" --do_eval \
  --max_seq_length=64 --max_predictions_per_seq=10 --eval_batch_size=64 --max_eval_steps=50 \
  > "$OUT/pretrain_eval.log" 2>&1
echo "held-out pretraining eval:"; sed 's/^/  /' "$OUT/pretrain/eval_results.txt"

stage "4/5 run_classifier.py (sst-2 layout) from the pretrained checkpoint"
shown "$OUT/classifier.log" "^step |^First step" \
  $PY run_classifier.py --task_name=sst-2 --data_dir="$OUT/data/sst-2" \
  --vocab_file="$OUT/data/vocab.txt" --bert_config_file="$OUT/data/bert_config.json" \
  --init_checkpoint="$OUT/pretrain" --output_dir="$OUT/classifier" --do_train --do_eval \
  --max_seq_length=64 --train_batch_size=32 --learning_rate=1e-4 --num_train_epochs=$EPOCHS \
  --log_steps=30
echo "dev results:"; sed 's/^/  /' "$OUT/classifier/eval_results.txt"

stage "5/5 export_savedmodel.py, then ask it"
$PY export_savedmodel.py --task=glue --task_name=sst-2 \
  --vocab_file="$OUT/data/vocab.txt" --bert_config_file="$OUT/data/bert_config.json" \
  --init_checkpoint="$OUT/classifier" --export_dir="$OUT/export" --max_seq_length=64 \
  > "$OUT/export.log" 2>&1
ASKED=("$SENTENCE")
[ $# -ge 1 ] || ASKED+=("${EVERYDAY[@]}")
$PY "${ASK[@]}" "${ASKED[@]}" 2> "$OUT/ask.log" | tee "$OUT/ask.txt"

echo
$PY demo/summary.py --out_dir="$OUT" --seconds=$((SECONDS - start)) \
  --pretrain_steps="$PRETRAIN_STEPS" --epochs="$EPOCHS"
