"""Run masked LM/next sentence masked_lm pre-training for BERT."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

from bert_tf.cli import app  # noqa: E402

app.catch_startup_signals()  # Ctrl-C while TensorFlow loads: one line, not a traceback

from absl import flags  # noqa: E402

from bert_tf.cli import flags as bert_flags  # noqa: E402
from bert_tf.jobs import pretraining  # noqa: E402


def define_flags():
  bert_flags.define_model_flags(vocab=False)
  flags.DEFINE_string("input_file", None,
                      "Input TF example files (can be a glob or comma separated).")
  bert_flags.define_output_dir_flag()
  bert_flags.define_max_seq_length_flag(128, "Sequences longer than this will be truncated, and "
                                        "sequences shorter than this will be padded. Must match "
                                        "data generation.")
  flags.DEFINE_integer("max_predictions_per_seq", 20, "Maximum number of masked LM predictions "
                       "per sequence. Must match data generation.")
  bert_flags.define_phase_flags(with_predict=False)
  bert_flags.define_batch_size_flags(with_predict=False)
  bert_flags.define_learning_rate_flag()
  flags.DEFINE_integer("num_train_steps", 100000, "Number of training steps.")
  flags.DEFINE_integer("num_warmup_steps", 10000, "Number of warmup steps.")
  flags.DEFINE_integer("max_eval_steps", 100, "Maximum number of eval steps.")
  flags.DEFINE_bool("no_nsp", False, "Ablation: masked LM only, no next sentence prediction.")
  flags.DEFINE_bool("left_to_right", False, "Ablation: a left-to-right LM (causal attention, "
                    "every next token predicted from the unmasked text, no next sentence "
                    "prediction).")
  flags.DEFINE_bool("pack_sequences", False, "Pack several instances of the records into each "
                    "row of --max_seq_length at input time (attention, positions, masked-LM "
                    "predictions and next sentence labels stay per instance; --train_batch_size "
                    "and --eval_batch_size count rows). Same losses, less padding.")
  flags.DEFINE_integer("max_instances_per_row", None, "With --pack_sequences: instances per row "
                       "at most (default: max(2, --max_seq_length / 16)).")
  flags.DEFINE_integer("max_predictions_per_row", None, "With --pack_sequences: masked-LM "
                       "predictions per row at most (default: max(--max_predictions_per_seq, "
                       "0.15 x --max_seq_length) + --max_instances_per_row / 2; --max_seq_length "
                       "with --left_to_right). An instance that does not fit starts a new row.")
  bert_flags.define_dynamic_masking_flags()
  bert_flags.define_export_tf1_checkpoint_flag()
  bert_flags.define_vocab_file_flag("The vocabulary of the records (create_pretraining_data.py's "
                                    "--vocab_file), copied into --output_dir as vocab.txt so that "
                                    "it is a complete model directory. Optional, but for "
                                    "--dynamic_masking.")
  bert_flags.define_runtime_flags()
  flags.adopt_module_key_flags(bert_flags)  # --helpshort lists the shared flags too


def main(_):
  values = bert_flags.values()
  pretraining.run(bert_flags.pretraining_options(values), bert_flags.runtime_options(values),
                  bert_flags.train_loop_options(values))


if __name__ == "__main__":
  define_flags()
  bert_flags.mark_required("input_file", "output_dir")
  app.run(main)
