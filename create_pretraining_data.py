"""Create masked LM/next sentence masked_lm TF examples for BERT.

The same flags give the same records, in the same order, as the original create_pretraining_data.py;
--num_workers, the masking / NSP ablations and sharding are additions.

  python create_pretraining_data.py --input_file=corpus/*.txt --output_file=out/pretrain.tfrecord \
    --vocab_file=vocab.txt --max_seq_length=128 --max_predictions_per_seq=20 --dupe_factor=5

A corpus of many files can be split over machines: --num_shards=N --shard_index=i takes every N-th
input file, seeds itself from --random_seed and i, and writes <output_file>-0000i-of-0000N; with
--num_shards=N and no --shard_index, one run does every shard whose output is not there yet.
--beam_runner=DirectRunner (or DataflowRunner, FlinkRunner, ...) makes the same --num_shards shards
as an Apache Beam pipeline (pip install apache-beam), one shard per worker at a time.
--unmasked writes records without masks for run_pretraining.py --dynamic_masking (--dupe_factor=1).
"""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

from bert_tf.cli import app  # noqa: E402

app.catch_startup_signals()  # Ctrl-C while TensorFlow loads: one line, not a traceback

from absl import flags  # noqa: E402

from bert_tf.cli import flags as bert_flags  # noqa: E402
from bert_tf.data.pretraining_data import pipeline  # noqa: E402

bert_flags.define_flags(pipeline.DataOptions)
flags.adopt_module_key_flags(bert_flags)  # --helpshort lists them


def main(_):
  options = bert_flags.build(pipeline.DataOptions, bert_flags.values())
  if options.beam_runner:
    from bert_tf.data.pretraining_data import beam  # noqa: E402  (apache-beam is optional)
    beam.main(options)
  else:
    pipeline.main(options)


if __name__ == "__main__":
  bert_flags.mark_required("input_file", "output_file", "vocab_file")
  app.run(main)
