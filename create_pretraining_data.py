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

flags.DEFINE_string("input_file", None, "Input raw text file (or comma-separated list of files).")
flags.DEFINE_string("output_file", None, "Output TF example file (or comma-separated list of files).")
flags.DEFINE_string("vocab_file", None, "The vocabulary file that the BERT model was trained on.")
flags.DEFINE_bool("do_lower_case", True, "Whether to lower case the input text. Should be True for "
                  "uncased models and False for cased models.")
flags.DEFINE_integer("max_seq_length", 128, "Maximum sequence length.")
flags.DEFINE_integer("max_predictions_per_seq", 20, "Maximum number of masked LM predictions per sequence.")
flags.DEFINE_integer("random_seed", 12345, "Random seed for data generation.")
flags.DEFINE_integer("dupe_factor", 10, "Number of times to duplicate the input data (with different masks).")
flags.DEFINE_float("short_seq_prob", 0.1, "Probability of creating sequences which are shorter than "
                   "the maximum length.")
bert_flags.define_masking_flags()
bert_flags.define_unmasked_flag()
flags.DEFINE_bool("no_nsp", False, "Write single-segment instances with no next-sentence pairing (the "
                  "\"No NSP\" ablation); next_sentence_labels is always 0.")
flags.DEFINE_integer("num_workers", 1, "Processes that read, tokenize and serialize in parallel; with "
                     "more than one, records are serialized while instances are made and spooled beside "
                     "the output (disk space the size of the output). The output does not depend on it.")
flags.DEFINE_integer("num_shards", 1, "Split the input files into this many shards, each with its own "
                     "seed and output files named <output_file>-<shard>-of-<num_shards>.")
flags.DEFINE_integer("shard_index", None, "The shard to make, in [0, num_shards). Default with "
                     "--num_shards > 1: every shard whose output files do not exist yet.")
flags.DEFINE_string("beam_runner", None, "Make the --num_shards shards with this Apache Beam runner "
                    "(DirectRunner, DataflowRunner, FlinkRunner, ...) instead of in this process; the "
                    "files are the same. Needs apache-beam.")
flags.DEFINE_string("beam_pipeline_options", "", "Beam pipeline options for --beam_runner, space-separated "
                    "(shell quoting), e.g. \"--project=P --region=R --temp_location=gs://B/tmp "
                    "--setup_file=./pyproject.toml\" for Dataflow.")
flags.DEFINE_integer("progress_seconds", 30, "Log progress (documents, instances, MB/s) this often.")
flags.adopt_module_key_flags(bert_flags)  # --helpshort lists the masking flags too


def main(_):
  options = bert_flags.pretraining_data_options(bert_flags.values())
  if options.beam_runner:
    from bert_tf.data.pretraining_data import beam  # noqa: E402  (apache-beam is optional)
    beam.main(options)
  else:
    pipeline.main(options)


if __name__ == "__main__":
  bert_flags.mark_required("input_file", "output_file", "vocab_file")
  app.run(main)
