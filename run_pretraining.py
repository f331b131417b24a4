"""Run masked LM/next sentence masked_lm pre-training for BERT."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

from absl import flags  # noqa: E402
from absl import logging  # noqa: E402
import tensorflow as tf  # noqa: E402

from bert_tf import checkpoints  # noqa: E402
from bert_tf import cli  # noqa: E402
from bert_tf import common_flags  # noqa: E402
from bert_tf import modeling  # noqa: E402
from bert_tf import pretraining  # noqa: E402
from bert_tf import records  # noqa: E402
from bert_tf import training  # noqa: E402
from bert_tf.config import BertConfig  # noqa: E402
from bert_tf.errors import BertTfError  # noqa: E402

FLAGS = flags.FLAGS

## Required parameters
flags.DEFINE_string(
    "bert_config_file", None,
    "The config json file corresponding to the pre-trained BERT model. "
    "This specifies the model architecture.")
flags.DEFINE_string("input_file", None,
                    "Input TF example files (can be a glob or comma separated).")
flags.DEFINE_string("output_dir", None,
                    "The output directory where the model checkpoints will be written.")

## Other parameters
flags.DEFINE_string("init_checkpoint", None,
                    "Initial checkpoint (usually from a pre-trained BERT model): an original TF1 "
                    "checkpoint, one of ours (e.g. phase 1 for phase 2) or a Hugging Face "
                    "directory. Ignored when --output_dir already holds a checkpoint to resume.")
flags.DEFINE_integer(
    "max_seq_length", 128,
    "The maximum total input sequence length after WordPiece tokenization. "
    "Sequences longer than this will be truncated, and sequences shorter "
    "than this will be padded. Must match data generation.")
flags.DEFINE_integer(
    "max_predictions_per_seq", 20,
    "Maximum number of masked LM predictions per sequence. Must match data generation.")
flags.DEFINE_bool("do_train", False, "Whether to run training.")
flags.DEFINE_bool("do_eval", False, "Whether to run eval on the dev set.")
flags.DEFINE_integer("train_batch_size", 32, "Total batch size for training.")
flags.DEFINE_integer("eval_batch_size", 8, "Total batch size for eval.")
flags.DEFINE_float("learning_rate", 5e-5, "The initial learning rate for Adam.")
flags.DEFINE_integer("num_train_steps", 100000, "Number of training steps.")
flags.DEFINE_integer("num_warmup_steps", 10000, "Number of warmup steps.")
flags.DEFINE_integer("max_eval_steps", 100, "Maximum number of eval steps.")
flags.DEFINE_bool("no_nsp", False, "Ablation: masked LM only, no next sentence prediction.")
flags.DEFINE_bool("left_to_right", False,
                  "Ablation: a left-to-right LM (causal attention, every next token predicted "
                  "from the unmasked text, no next sentence prediction).")
flags.DEFINE_bool("export_tf1_checkpoint", False,
                  "After training, also write the final weights as an original-layout TF1 "
                  "checkpoint, <output_dir>/bert_model.ckpt, with bert_config.json beside it.")
common_flags.define_runtime_flags()
flags.adopt_module_key_flags(common_flags)  # --helpshort lists the shared flags too


def main(_):
  logging.set_verbosity(logging.INFO)
  strategy = common_flags.runtime_from_flags()
  if not FLAGS.do_train and not FLAGS.do_eval:
    raise BertTfError("--do_train/--do_eval: at least one of them must be True")
  config = BertConfig.from_json_file(FLAGS.bert_config_file)
  if FLAGS.max_seq_length > config.max_position_embeddings:
    raise BertTfError(f"--max_seq_length: {FLAGS.max_seq_length} is longer than the model's "
                      f"max_position_embeddings ({config.max_position_embeddings}) in "
                      f"{FLAGS.bert_config_file}")
  tf.io.gfile.makedirs(FLAGS.output_dir)

  input_files = records.input_files(FLAGS.input_file, "--input_file")
  logging.info("*** Input Files ***")
  name_to_features = records.pretraining_features(FLAGS.max_seq_length,
                                                  FLAGS.max_predictions_per_seq)
  for input_file in input_files:
    logging.info("  %s", input_file)
    records.check_record_shapes(input_file, name_to_features)

  use_nsp = not (FLAGS.no_nsp or FLAGS.left_to_right)
  loss_fn = pretraining.loss_fn(use_nsp)
  metric_fn = pretraining.metric_fn(use_nsp)

  def model_fn():
    return modeling.BertPretrainer(config, causal=FLAGS.left_to_right)

  def input_fn(batch_size, is_training):
    return pretraining.input_fn(
        input_files, FLAGS.max_seq_length, FLAGS.max_predictions_per_seq, batch_size,
        is_training, seed=FLAGS.seed, left_to_right=FLAGS.left_to_right,
        gradient_accumulation_steps=FLAGS.gradient_accumulation_steps if is_training else 1)

  model = None
  if FLAGS.do_train:
    logging.info("***** Running training *****")
    logging.info("  Batch size = %d", FLAGS.train_batch_size)
    model = training.train(
        strategy, model_fn, loss_fn, input_fn(FLAGS.train_batch_size, True),
        FLAGS.num_train_steps, FLAGS.learning_rate, FLAGS.num_warmup_steps, FLAGS.output_dir,
        init_checkpoint=FLAGS.init_checkpoint, metric_fn=metric_fn,
        train_batch_size=FLAGS.train_batch_size, **common_flags.train_kwargs_from_flags())
    if FLAGS.export_tf1_checkpoint and strategy.extended.should_checkpoint:
      path = checkpoints.save_tf1_checkpoint(model, os.path.join(FLAGS.output_dir,
                                                                 "bert_model.ckpt"))
      config.to_json_file(os.path.join(FLAGS.output_dir, "bert_config.json"))
      logging.info("Wrote the TF1 checkpoint %s", path)

  if FLAGS.do_eval:
    logging.info("***** Running evaluation *****")
    logging.info("  Batch size = %d", FLAGS.eval_batch_size)
    eval_input_fn = input_fn(FLAGS.eval_batch_size, False)
    if model is None:
      model, _ = training.restore_model(strategy, model_fn, eval_input_fn, FLAGS.output_dir,
                                        FLAGS.init_checkpoint)
    result = training.evaluate(strategy, model, eval_input_fn, metric_fn, loss_fn,
                               steps=FLAGS.max_eval_steps, global_step=training.global_step(model))
    if strategy.extended.should_checkpoint:
      logging.info("***** Eval results *****")
      training.write_eval_results(os.path.join(FLAGS.output_dir, "eval_results.txt"), result)


if __name__ == "__main__":
  flags.mark_flag_as_required("input_file")
  flags.mark_flag_as_required("bert_config_file")
  flags.mark_flag_as_required("output_dir")
  cli.run(main)
