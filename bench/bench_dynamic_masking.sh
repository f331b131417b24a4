#!/bin/bash
# Dynamic masking measurements: create_pretraining_data default vs --unmasked --dupe_factor=1,
# then run_pretraining steps/s with and without --dynamic_masking (tiny config).
set -e
cd "$(dirname "$0")/.."
PY=.venv/bin/python
B=/work/shared/data/corpus/gutenberg/pg1342-pride_and_prejudice.txt
V=/work/shared/data/vocab/bert-base-uncased-vocab.txt
O=${OUT:-/tmp/dm_bench}; mkdir -p $O
for rep in 1 2 3; do
  for kind in masked unmasked; do
    extra=""; [ $kind = unmasked ] && extra="--unmasked --dupe_factor=1"
    rm -f $O/$kind.tfrecord
    /usr/bin/time -f "CPD $kind rep$rep %e s %M KB" $PY create_pretraining_data.py --input_file=$B \
      --output_file=$O/$kind.tfrecord --vocab_file=$V $extra --progress_seconds=1000 2>&1 | grep -E "^CPD|instances written" || true
    ls -l $O/$kind.tfrecord | awk -v k=$kind '{print "SIZE", k, $5}'
  done
done
# bench_configs' "mini" (BertConfig's default 16 segment types, as this bench always had).
PYTHONPATH=bench $PY -c "import bench_configs as c; c.write_config('mini', '$O/config.json', type_vocab_size=16)"
for rep in 1 2; do
  for kind in masked unmasked; do
    extra=""; rec=$O/masked.tfrecord
    [ $kind = unmasked ] && extra="--dynamic_masking --vocab_file=$V" && rec=$O/unmasked.tfrecord
    rm -rf $O/run_$kind
    $PY run_pretraining.py --bert_config_file=$O/config.json --input_file=$rec --output_dir=$O/run_$kind \
      --do_train --train_batch_size=32 --max_seq_length=128 --max_predictions_per_seq=20 \
      --num_train_steps=300 --num_warmup_steps=10 --save_checkpoints_steps=1000 \
      --iterations_per_loop=100 --log_steps=100 $extra 2>&1 | grep -iE "steps?/s|step 300|steps_per_second" | tail -3 | sed "s/^/RUN $kind rep$rep: /"
  done
done
