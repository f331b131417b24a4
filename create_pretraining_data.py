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
"""
import os
import shlex

os.environ["TF_USE_LEGACY_KERAS"] = "1"

from absl import flags  # noqa: E402

from bert_tf import cli  # noqa: E402
from bert_tf import flags as bert_flags  # noqa: E402
from bert_tf import progress  # noqa: E402
from bert_tf import records  # noqa: E402
from bert_tf import tokenization  # noqa: E402
from bert_tf.data import pretraining  # noqa: E402
from bert_tf.errors import BertTfError  # noqa: E402

flags.DEFINE_string("input_file", None, "Input raw text file (or comma-separated list of files).")
flags.DEFINE_string("output_file", None, "Output TF example file (or comma-separated list of files).")
flags.DEFINE_string("vocab_file", None, "The vocabulary file that the BERT model was trained on.")
flags.DEFINE_bool("do_lower_case", True, "Whether to lower case the input text. Should be True for "
                  "uncased models and False for cased models.")
flags.DEFINE_bool("do_whole_word_mask", False, "Whether to use whole word masking rather than "
                  "per-WordPiece masking.")
flags.DEFINE_integer("max_seq_length", 128, "Maximum sequence length.")
flags.DEFINE_integer("max_predictions_per_seq", 20, "Maximum number of masked LM predictions per sequence.")
flags.DEFINE_integer("random_seed", 12345, "Random seed for data generation.")
flags.DEFINE_integer("dupe_factor", 10, "Number of times to duplicate the input data (with different masks).")
flags.DEFINE_float("masked_lm_prob", 0.15, "Masked LM probability.")
flags.DEFINE_float("short_seq_prob", 0.1, "Probability of creating sequences which are shorter than "
                   "the maximum length.")
flags.DEFINE_float("mask_prob_mask", 0.8, "Of the tokens chosen for prediction, the fraction replaced "
                   "by [MASK] (the paper's Table 8 ablation). The three --mask_prob_* must sum to 1.")
flags.DEFINE_float("mask_prob_keep", 0.1, "Of the tokens chosen for prediction, the fraction left as they are.")
flags.DEFINE_float("mask_prob_random", 0.1, "Of the tokens chosen for prediction, the fraction replaced "
                   "by a random vocab token.")
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

FLAGS = flags.FLAGS


def main(_):
  options = pretraining.Options(
      max_seq_length=FLAGS.max_seq_length, max_predictions_per_seq=FLAGS.max_predictions_per_seq,
      random_seed=FLAGS.random_seed, dupe_factor=FLAGS.dupe_factor, masked_lm_prob=FLAGS.masked_lm_prob,
      short_seq_prob=FLAGS.short_seq_prob, do_whole_word_mask=FLAGS.do_whole_word_mask,
      mask_prob_mask=FLAGS.mask_prob_mask, mask_prob_keep=FLAGS.mask_prob_keep,
      mask_prob_random=FLAGS.mask_prob_random, no_nsp=FLAGS.no_nsp)
  options.validate()
  input_files = records.input_files(FLAGS.input_file)
  output_files = [path for path in FLAGS.output_file.split(",") if path.strip()]
  if FLAGS.beam_runner:
    # The runner runs every shard, on as many workers as it has.
    if FLAGS.shard_index is not None:
      raise BertTfError("--shard_index: not used with --beam_runner, which makes every shard of --num_shards")
    if FLAGS.num_workers != 1:
      raise BertTfError("--num_workers: must be 1 with --beam_runner; the runner's workers run shards in "
                        "parallel")
    from bert_tf.data import pretraining_beam  # only here: apache-beam is optional
    written = pretraining_beam.run(
        input_files, output_files, FLAGS.vocab_file, FLAGS.do_lower_case, options, FLAGS.num_shards,
        FLAGS.beam_runner, shlex.split(FLAGS.beam_pipeline_options), progress_seconds=FLAGS.progress_seconds)
    progress.summary("Finished", [("records", f"{FLAGS.output_file} (shards -NNNNN-of-"
                                              f"{FLAGS.num_shards:05d})")],
                     {"shards written": len(written)})
    return
  tokenizer = tokenization.FullTokenizer(vocab_file=FLAGS.vocab_file, do_lower_case=FLAGS.do_lower_case)
  pretraining.run_shards(input_files, output_files, tokenizer, options, FLAGS.num_shards, FLAGS.shard_index,
                         num_workers=FLAGS.num_workers, progress_seconds=FLAGS.progress_seconds)


if __name__ == "__main__":
  bert_flags.mark_required("input_file", "output_file", "vocab_file")
  cli.run(main)
