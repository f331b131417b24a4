"""Runtime flags every run_*.py shares (strategy, precision, seed, TPU, checkpointing, optimizer).

A script calls define_runtime_flags() at import time, then in main():
  strategy = common_flags.runtime_from_flags()   # strategy first, then precision, seed, determinism
and passes the remaining FLAGS values to bert_tf.training.train(...).
"""
from absl import flags
from absl import logging
import tensorflow as tf

from bert_tf import tokenization
from bert_tf import training
from bert_tf.config import BertConfig
from bert_tf.errors import BertTfError

FLAGS = flags.FLAGS


def define_runtime_flags():
  """Defines the shared flags (once; a second call is a no-op so tests can import several scripts)."""
  if "distribution_strategy" in FLAGS:
    return
  flags.DEFINE_enum("distribution_strategy", "one_device", training.STRATEGIES,
                    "How to spread training over devices: one_device (GPU:0 if any, else CPU), "
                    "mirrored (all local GPUs, or --num_gpus), multi_worker_mirrored (one process "
                    "per worker, cluster from the TF_CONFIG environment variable) or tpu. "
                    "--use_tpu implies tpu.")
  flags.DEFINE_integer("num_gpus", None, "GPUs for --distribution_strategy=mirrored "
                       "(default: all visible; 0 means the CPU).")
  flags.DEFINE_enum("dtype", "float32", list(training.PRECISIONS),
                    "Compute precision: float32, bfloat16 (mixed_bfloat16: bf16 compute, float32 "
                    "variables) or float16 (mixed_float16 with dynamic loss scaling).")
  flags.DEFINE_bool("use_xla", False, "Compile the train/eval steps with XLA (jit_compile).")
  flags.DEFINE_integer("seed", 12345, "Seed of every random choice: initialization, dropout, "
                       "input shuffling. The same flags give the same weights.")
  flags.DEFINE_bool("deterministic", True, "Enable TF op determinism (bit-identical reruns and "
                    "resumption; slightly slower on GPU).")
  flags.DEFINE_enum("optimizer", "adamw", ["adamw", "lamb"],
                    "adamw: the original AdamWeightDecay; lamb: LAMB for large batches.")
  flags.DEFINE_bool("adam_bias_correction", False, "With --optimizer=adamw, divide Adam's moments "
                    "by (1 - beta^t) as torch's AdamW and Model Garden's AdamW do. The original "
                    "does not: its early steps are larger (by up to 6.5x near step 12, 3x at step "
                    "100, 1.3x at step 1,000). LAMB always corrects.")
  flags.DEFINE_integer("gradient_accumulation_steps", 1,
                       "Split each batch of --train_batch_size into this many micro-batches and "
                       "apply their summed gradients once (same result, less memory).")
  flags.DEFINE_integer("save_checkpoints_steps", 1000, "How often to save the model checkpoint.")
  flags.DEFINE_integer("keep_checkpoint_max", 5, "How many recent checkpoints to keep.")
  flags.DEFINE_integer("iterations_per_loop", 1000,
                       "Steps run inside one tf.function call between host-side work (logging, "
                       "checkpoints, NaN checks).")
  flags.DEFINE_integer("log_steps", 100, "Steps between progress lines and summaries.")
  # The original's TPU flags.
  flags.DEFINE_bool("use_tpu", False, "Whether to use TPU or GPU/CPU.")
  flags.DEFINE_string("tpu_name", None,
                      "The Cloud TPU to use for training. This should be either the name used "
                      "when creating the Cloud TPU, or a grpc://ip.address.of.tpu:8470 url.")
  flags.DEFINE_string("tpu_zone", None,
                      "[Optional] GCE zone where the Cloud TPU is located in. If not specified, "
                      "we will attempt to automatically detect the GCE project from metadata.")
  flags.DEFINE_string("gcp_project", None,
                      "[Optional] Project name for the Cloud TPU-enabled project. If not "
                      "specified, we will attempt to automatically detect the GCE project from "
                      "metadata.")
  flags.DEFINE_string("master", None, "[Optional] TensorFlow master URL.")
  flags.DEFINE_integer("num_tpu_cores", 8,
                       "Only used if `use_tpu` is True. Total number of TPU cores to use.")


def strategy_name_from_flags():
  return "tpu" if FLAGS.use_tpu else FLAGS.distribution_strategy


def trim_padding_from_flags():
  """Whether task models may run each batch at its longest sequence: not where shapes are compiled
  statically (XLA, TPU)."""
  return not FLAGS.use_xla and strategy_name_from_flags() != "tpu"


def runtime_from_flags():
  """The strategy for the flags, after which precision, seed and determinism are set. Call first:
  multi_worker_mirrored must be created before any other TensorFlow op runs."""
  strategy = training.get_strategy(strategy_name_from_flags(), num_gpus=FLAGS.num_gpus,
                                   tpu_name=FLAGS.tpu_name, tpu_zone=FLAGS.tpu_zone,
                                   gcp_project=FLAGS.gcp_project, master=FLAGS.master)
  training.set_precision(FLAGS.dtype)
  training.set_seed(FLAGS.seed, deterministic=FLAGS.deterministic)
  return strategy


def train_kwargs_from_flags():
  """The train(...) keyword arguments that come straight from the shared flags."""
  return dict(optimizer_type=FLAGS.optimizer, adam_bias_correction=FLAGS.adam_bias_correction,
              gradient_accumulation_steps=FLAGS.gradient_accumulation_steps,
              save_checkpoints_steps=FLAGS.save_checkpoints_steps,
              keep_checkpoint_max=FLAGS.keep_checkpoint_max,
              steps_per_loop=FLAGS.iterations_per_loop, log_steps=FLAGS.log_steps,
              use_xla=FLAGS.use_xla, seed=FLAGS.seed)


def finetuning_steps(f, num_examples, what):
  """(num_train_steps, num_warmup_steps) for f.num_train_epochs over num_examples `what` (e.g.
  "training examples"), as the original computes them."""
  num_train_steps = int(num_examples / f.train_batch_size * f.num_train_epochs)
  if num_train_steps < 1:
    raise BertTfError(f"--train_batch_size: {num_examples} {what} make no full batch of "
                      f"{f.train_batch_size} in {f.num_train_epochs} epochs")
  return num_train_steps, int(num_train_steps * f.warmup_proportion)


# Records held by the fine-tuning shuffle buffer at most (~1 KB each at seq 128).
MAX_FINETUNE_SHUFFLE_BUFFER = 100_000


def finetune(f, strategy, model_fn, loss_fn, train_file, schema, num_examples, num_train_steps,
             num_warmup_steps, metric_fn=None):
  """training.train on the `num_examples` records of `train_file` with the fine-tuning flags `f`.

  The records are shuffled over a buffer as large as the training set (up to
  MAX_FINETUNE_SHUFFLE_BUFFER), not the original's 100: train files keep the order of the task's
  data, and CoLA's, for one, is sorted by source, so 100-record windows made batches of one
  source and cost several points of Matthews correlation. Returns the model.
  """
  logging.info("  Batch size = %d", f.train_batch_size)
  logging.info("  Num steps = %d", num_train_steps)
  train_input_fn = training.records_input_fn(
      [train_file], schema, f.train_batch_size, is_training=True, seed=f.seed,
      gradient_accumulation_steps=f.gradient_accumulation_steps,
      shuffle_buffer_size=max(1, min(num_examples, MAX_FINETUNE_SHUFFLE_BUFFER)))
  return training.train(
      strategy, model_fn, loss_fn, train_input_fn, num_train_steps, f.learning_rate,
      num_warmup_steps, f.output_dir, init_checkpoint=f.init_checkpoint, metric_fn=metric_fn,
      train_batch_size=f.train_batch_size, **train_kwargs_from_flags())


def define_model_flags():
  """The model and output flags of every fine-tuning script, with the original's help."""
  flags.DEFINE_string("bert_config_file", None, "The config json file corresponding to the "
                      "pre-trained BERT model. This specifies the model architecture.")
  flags.DEFINE_string("vocab_file", None, "The vocabulary file that the BERT model was trained on.")
  flags.DEFINE_string("init_checkpoint", None, "Initial checkpoint (usually from a pre-trained "
                      "BERT model): original TF1, one of ours, or a Hugging Face directory.")
  flags.DEFINE_bool("do_lower_case", True, "Whether to lower case the input text. Should be True "
                    "for uncased models and False for cased models.")
  flags.DEFINE_string("output_dir", None, "The output directory where the model checkpoints and "
                      "results will be written.")


def define_finetuning_flags(max_seq_length=128, with_eval=True,
                            max_seq_length_help="Sequences longer than this will be truncated, "
                            "and sequences shorter than this will be padded."):
  """The run_classifier-style phase and hyperparameter flags, with the original's defaults."""
  flags.DEFINE_integer("max_seq_length", max_seq_length, "The maximum total input sequence "
                       "length after WordPiece tokenization. " + max_seq_length_help)
  flags.DEFINE_bool("do_train", False, "Whether to run training.")
  if with_eval:
    flags.DEFINE_bool("do_eval", False, "Whether to run eval on the dev set.")
  flags.DEFINE_bool("do_predict", False, "Whether to run the model in inference mode on the "
                    "test set.")
  flags.DEFINE_integer("train_batch_size", 32, "Total batch size for training.")
  if with_eval:
    flags.DEFINE_integer("eval_batch_size", 8, "Total batch size for eval.")
  flags.DEFINE_integer("predict_batch_size", 8, "Total batch size for predict.")
  flags.DEFINE_float("learning_rate", 5e-5, "The initial learning rate for Adam.")
  flags.DEFINE_float("num_train_epochs", 3.0, "Total number of training epochs to perform.")
  flags.DEFINE_float("warmup_proportion", 0.1, "Proportion of training to perform linear "
                     "learning rate warmup for. E.g., 0.1 = 10% of training.")


def define_export_flag():
  flags.DEFINE_string("export_dir", None, "If set, the fine-tuned model in output_dir is also "
                      "exported there as a SavedModel that takes raw text (export_savedmodel.py).")


def config_and_tokenizer_from_flags(f):
  """Checks the model flags as the original scripts do; returns (BertConfig, FullTokenizer).

  Python only, so bad flags fail before runtime_from_flags() starts TensorFlow's runtime.
  """
  tokenization.validate_case_matches_checkpoint(f.do_lower_case, f.init_checkpoint)
  config = BertConfig.from_json_file(f.bert_config_file)
  if f.max_seq_length > config.max_position_embeddings:
    raise BertTfError(f"--max_seq_length: cannot use sequence length {f.max_seq_length} because "
                      f"the BERT model was only trained up to sequence length "
                      f"{config.max_position_embeddings}")
  if not tf.io.gfile.exists(f.vocab_file):
    raise BertTfError(f"--vocab_file: {f.vocab_file} not found")
  return config, tokenization.FullTokenizer(f.vocab_file, do_lower_case=f.do_lower_case)
