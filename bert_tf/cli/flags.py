"""Every flag the scripts share, defined once; the only module of bert_tf that reads absl's FLAGS.

A script defines the groups it uses at import time, marks its required flags, and turns the parsed
values into typed options (bert_tf.training.options, bert_tf.jobs), which are what the library
receives:

  bert_flags.define_model_flags()
  bert_flags.define_runtime_flags()
  ...
  def main(_):
    values = bert_flags.values()
    pretraining.run(bert_flags.pretraining_options(values), bert_flags.runtime_options(values),
                    bert_flags.train_loop_options(values))

Each range or combination rule lives once, beside the option it constrains (the __post_init__ of
its dataclass): RuntimeOptions, TrainLoopOptions, FinetuneOptions, PretrainingOptions,
pipeline.DataOptions, feature_extraction.ExtractOptions, vocab_learning.VocabOptions and each
fine-tuning task's options check theirs as a script's main builds them, before any work. A
fine-tuning task's own flags are the fields of its options dataclass (define_options_flags defines
them from the names, defaults and help texts the task module states; finetune_options builds the
dataclass, whose rules check the values).

The names, defaults and help texts of the original's flags are the original's. Defining a flag
that is already defined is a no-op, so several scripts can be imported by one test process.
"""
import dataclasses
import sys
import types
import typing

from absl import flags

from bert_tf.jobs import finetune_options as finetune_options_lib
from bert_tf.jobs import pretraining_options as pretraining_options_lib
from bert_tf.model import objectives
from bert_tf.training import options
from bert_tf.training.options import OPTIMIZERS, STRATEGIES
from bert_tf.training import precision

FLAGS = flags.FLAGS


def _define(kind, name, default, help_text, **kwargs):
  if name not in FLAGS:
    getattr(flags, f"DEFINE_{kind}")(name, default, help_text, **kwargs)


def _define_enum(name, default, enum_values, help_text):
  if name not in FLAGS:
    flags.DEFINE_enum(name, default, enum_values, help_text)


def values():
  """The parsed flags as a plain object (attribute per flag); the library reads nothing else.

  The typed options that a script builds from it check their own rules (a batch size of 0, a
  negative learning rate, ...: BertTfError naming the flag).
  """
  return types.SimpleNamespace(**FLAGS.flag_values_dict())


def _given(values, name, default=None):
  """A flag's value, or `default` where the script does not define the flag."""
  return getattr(values, name, default)


def runtime_options(values):
  """The bert_tf.training.options.RuntimeOptions of the runtime flags (those a script lacks keep their
  defaults; seed None without the training runtime flags: nothing is seeded)."""
  defaults = options.RuntimeOptions()
  return options.RuntimeOptions(**{
      field.name: _given(values, field.name, getattr(defaults, field.name))
      for field in dataclasses.fields(options.RuntimeOptions)})


def masking_options(values):
  """The bert_tf.model.objectives.Masking of the masking flags (dynamic: --dynamic_masking, which
  create_pretraining_data.py has not)."""
  return options_of(objectives.Masking, values, dynamic=_given(values, "dynamic_masking", False))


def pretraining_options(values):
  """The bert_tf.jobs.pretraining_options.PretrainingOptions of run_pretraining.py's flags."""
  objective = objectives.Objective.of_flags(values.no_nsp, values.left_to_right,
                                            masking_options(values))
  return options_of(pretraining_options_lib.PretrainingOptions, values, objective=objective)


def options_of(cls, values, **given):
  """A typed options dataclass `cls` from the flag values of its fields' names (and `given`)."""
  return cls(**{field.name: getattr(values, field.name) for field in dataclasses.fields(cls)
                if field.name not in given}, **given)


def pretraining_data_options(values):
  """The bert_tf.data.pretraining_data.pipeline.DataOptions of create_pretraining_data.py's flags."""
  from bert_tf.data.pretraining_data import algorithm  # pylint: disable=g-import-not-at-top
  from bert_tf.data.pretraining_data import pipeline  # pylint: disable=g-import-not-at-top
  return options_of(pipeline.DataOptions, values, instances=options_of(
      algorithm.Options, values, masking=masking_options(values)))


def _fields_given(cls, values):
  """{field: flag value} of the dataclass cls's fields that the script has a flag for."""
  return {field.name: getattr(values, field.name) for field in dataclasses.fields(cls)
          if hasattr(values, field.name)}


def finetune_options(task_class, values):
  """The bert_tf.jobs.finetune_options.FinetuneOptions of a fine-tuning script's flags: its task's own
  options (task_class.options_class) in `task`, the runtime's and the training loop's in `runtime`
  and `loop`; a field the script has no flag for keeps its default."""
  own = task_class.options_class
  shared = {name: value for name, value in _fields_given(finetune_options_lib.FinetuneOptions, values).items()
            if name not in ("task", "runtime", "loop")}
  return finetune_options_lib.FinetuneOptions(
      task=own(**_fields_given(own, values)) if own else None, runtime=runtime_options(values),
      loop=train_loop_options(values), distill=distill_options(values), **shared)


def distill_options(values):
  """The bert_tf.jobs.distillation.DistillOptions of the distillation flags (None for a script
  without them)."""
  from bert_tf.jobs import distillation  # pylint: disable=g-import-not-at-top
  if not hasattr(values, "teacher_dir"):
    return None
  return distillation.DistillOptions(**_fields_given(distillation.DistillOptions, values))


def export_options(values, task_class):
  """The bert_tf.jobs.finetune_options.ExportOptions of export_savedmodel.py's flags; task_class (the
  registered task that --task names) gives the task's own options, in `task`."""
  own = task_class.options_class
  shared = {name: value for name, value in _fields_given(finetune_options_lib.ExportOptions, values).items()
            if name != "task"}
  return finetune_options_lib.ExportOptions(task=own(**_fields_given(own, values)), **shared)


def train_loop_options(values):
  """The bert_tf.training.options.TrainLoopOptions of the training runtime flags (those a script lacks keep
  their defaults)."""
  return options.TrainLoopOptions(**_fields_given(options.TrainLoopOptions, values))


def mark_required(*names):
  """Marks the flags required: absl refuses to start without them, and --help says so."""
  for name in names:
    flags.mark_flag_as_required(name)
    flag = FLAGS[name]
    if not flag.help.startswith(_REQUIRED_MARK):
      flag.help = _REQUIRED_MARK + flag.help


def repeated_flags(argv):
  """(name, values) of each flag that argv gives more than once with different values; absl takes
  the last, as the original did (cli.run warns). A flag absl accepts many times (multi) is not
  counted; --name value, --name=value, --bool and --nobool are read as absl reads them."""
  given = {}
  args = iter(argv[1:])
  for arg in args:
    if arg == "--":
      break
    if not arg.startswith("-") or arg == "-":
      continue
    name, has_value, value = arg.lstrip("-").partition("=")
    if name not in FLAGS and name.startswith("no") and name[2:] in FLAGS and not has_value:
      name, has_value, value = name[2:], True, "false"
    if name not in FLAGS or name == "flagfile" or isinstance(FLAGS[name], flags.MultiFlag):
      continue
    flag = FLAGS[name]
    if not has_value:
      value = "true" if flag.boolean else next(args, "")
    try:
      parsed = flag.parser.parse(value)
    except (ValueError, TypeError):
      parsed = value
    given.setdefault(flag.name, []).append((value, repr(parsed)))
  return [(name, [value for value, _ in pairs]) for name, pairs in given.items()
          if len({parsed for _, parsed in pairs}) > 1]


# Flags that name where a run writes, in the order an interrupted run reports them.
OUTPUT_FLAGS = ("output_dir", "output_file", "export_dir", "output")


def outputs_given():
  """(--flag, value) of each output flag the script has and was given."""
  return [(f"--{name}", FLAGS[name].value) for name in OUTPUT_FLAGS
          if name in FLAGS and FLAGS[name].value]


def urls_given():
  """(--flag, path) of every path with a scheme (gs://, ...) in a string flag's value."""
  found = []
  for name in FLAGS:
    flag = FLAGS[name]
    if name == flag.name and isinstance(flag.value, str) and "://" in flag.value:
      found.extend((f"--{name}", part.strip()) for part in flag.value.split(",") if "://" in part)
  return found


# ------------------------------------------------------------------------------------------ help

_REQUIRED_MARK = "[required] "
# --help lists a script's flags in these groups, in this order; a flag not named here is the
# script's own data/task flag.
_DATA = "data and task"
_GROUPS = {
    "model": ("bert_config_file init_checkpoint vocab_file do_lower_case no_nsp left_to_right "
              "layers bilstm_head bilstm_hidden_size"),
    "training": ("do_train do_eval do_predict train_batch_size eval_batch_size predict_batch_size "
                 "batch_size learning_rate num_train_epochs warmup_proportion num_train_steps "
                 "num_warmup_steps max_eval_steps optimizer adam_bias_correction "
                 "gradient_accumulation_steps clip_norm_rule seed eval_every_n_steps "
                 "keep_best_metric early_stopping_patience pack_sequences max_instances_per_row "
                 "teacher_dir distill_temperature distill_alpha teacher_batch_size"),
    "output": ("output_dir output_file overwrite output output_format export_dir "
               "export_tf1_checkpoint save_checkpoints_steps keep_checkpoint_max log_steps "
               "progress_seconds tflite quantize max_quantization_loss quantization_check_file "
               "calibration_examples calibration_seed"),
    "runtime": ("distribution_strategy num_gpus dtype use_xla deterministic iterations_per_loop "
                "num_workers beam_runner beam_pipeline_options use_one_hot_embeddings"),
    "TPU": "use_tpu tpu_name tpu_zone gcp_project master num_tpu_cores",
}
# A task's flags say their group themselves (define_options_flags adds them).
_GROUP_OF = {name: group for group, names in _GROUPS.items() for name in names.split()}


def grouped_help():
  """The main module's flags as --help shows them: grouped (data and task, model, training,
  output, runtime, TPU), alphabetical within a group, required ones marked."""
  by_group = {}
  for flag in FLAGS.get_key_flags_for_module(sys.argv[0]):
    by_group.setdefault(_GROUP_OF.get(flag.name, _DATA), []).append(flag)
  lines = []
  for group in (_DATA, *_GROUPS):
    if group in by_group:
      lines.append(f"\n{group} flags:")
      FLAGS._render_flag_list(by_group[group], lines)  # pylint: disable=protected-access
  lines.append("\n-v (--verbosity=1): every log line, in absl's format, TensorFlow's own "
               "included (bert_tf.io.terminal).")
  return "\n".join(lines).lstrip("\n")


def use_grouped_help():
  """Makes --help (and --helpshort) print grouped_help(): absl's own lists the flags in one
  alphabetical run, TPU flags between the hyperparameters. (absl asks FLAGS.main_module_help for
  the text; the instance attribute takes the method's place, bypassing FlagValues.__setattr__,
  which would take it for a flag.)"""
  FLAGS.__dict__["main_module_help"] = grouped_help


# ---------------------------------------------------------------------------------------- model


def define_bert_config_flag():
  _define("string", "bert_config_file", None, "The config json file corresponding to the "
          "pre-trained BERT model. This specifies the model architecture.")


def define_init_checkpoint_flag():
  _define("string", "init_checkpoint", None, "Initial checkpoint (usually from a pre-trained BERT "
          "model): an original TF1 checkpoint, one of ours (a prefix or an output_dir) or a "
          "Hugging Face directory. Training resumes a checkpoint of --output_dir instead when "
          "there is one. For evaluation or prediction without training, and for export, the "
          "fine-tuned model.")


def define_vocab_file_flag(help_text="The vocabulary file that the BERT model was trained on."):
  _define("string", "vocab_file", None, help_text)


def define_vocab_flags():
  define_vocab_file_flag()
  _define("bool", "do_lower_case", True, "Whether to lower case the input text. Should be True "
          "for uncased models and False for cased models.")


def define_model_flags(vocab=True):
  """--bert_config_file, --init_checkpoint and (vocab=True) --vocab_file, --do_lower_case."""
  define_bert_config_flag()
  define_init_checkpoint_flag()
  if vocab:
    define_vocab_flags()


def define_bilstm_head_flags():
  """--bilstm_head, --bilstm_hidden_size: the paper's Table 5 "+ BiLSTM" fine-tuning head."""
  _define("bool", "bilstm_head", False, "Put a randomly initialized BiLSTM between BERT's sequence "
          "output and the task's output layer, trained with the rest of the model (the paper's "
          "Table 5 \"+ BiLSTM\", added on top of the left-to-right model). SQuAD's start/end and "
          "NER's tag logits read its outputs at each position; a classifier reads its final "
          "states (forward at the last token, backward at [CLS]) instead of the pooled [CLS] "
          "output. An exported SavedModel and bert_tf.serving.predictor include it.")
  _define("integer", "bilstm_hidden_size", None, "With --bilstm_head: units per direction of the "
          "BiLSTM (its outputs are twice as wide). Default: the model's hidden_size (768 for "
          "BERT-Base), as the feature-based NER's --lstm_units.")


def define_left_to_right_flag():
  """--left_to_right for the fine-tuning scripts (run_pretraining.py has its own)."""
  _define("bool", "left_to_right", False, "Fine-tune a --left_to_right pre-trained model as the "
          "paper's Table 5 does: every position attends only to itself and its left, and a "
          "classifier reads the pooler at the last real token (the only one that has seen the "
          "whole input) instead of at [CLS]. The checkpoints say so: export_savedmodel.py and "
          "bert_tf.serving.predictor build the model the same way; a resumed run must pass it again.")


def define_output_dir_flag():
  _define("string", "output_dir", None, "The output directory where the model checkpoints and "
          "results will be written.")


def define_max_seq_length_flag(default=128, extra_help="Sequences longer than this will be "
                               "truncated, and sequences shorter than this will be padded."):
  _define("integer", "max_seq_length", default, "The maximum total input sequence length after "
          "WordPiece tokenization. " + extra_help)


# ---------------------------------------------------------------------------------------- fine-tuning


def define_phase_flags(with_eval=True, with_predict=True):
  _define("bool", "do_train", False, "Whether to run training.")
  if with_eval:
    _define("bool", "do_eval", False, "Whether to run eval on the dev set.")
  if with_predict:
    _define("bool", "do_predict", False, "Whether to run the model in inference mode on the "
            "test set.")


def define_batch_size_flags(with_eval=True, with_predict=True):
  _define("integer", "train_batch_size", 32, "Total batch size for training.")
  if with_eval:
    _define("integer", "eval_batch_size", 8, "Total batch size for eval.")
  if with_predict:
    _define("integer", "predict_batch_size", 8, "Total batch size for predict.")


def define_learning_rate_flag():
  _define("float", "learning_rate", 5e-5, "The initial learning rate for Adam.")


def define_finetuning_flags(max_seq_length=128, with_eval=True,
                            max_seq_length_help="Sequences longer than this will be truncated, "
                            "and sequences shorter than this will be padded."):
  """The run_classifier-style output, phase and hyperparameter flags, with the original's
  defaults."""
  define_output_dir_flag()
  define_max_seq_length_flag(max_seq_length, max_seq_length_help)
  define_phase_flags(with_eval=with_eval)
  define_batch_size_flags(with_eval=with_eval)
  define_learning_rate_flag()
  _define("float", "num_train_epochs", 3.0, "Total number of training epochs to perform.")
  _define("float", "warmup_proportion", 0.1, "Proportion of training to perform linear learning "
          "rate warmup for. E.g., 0.1 = 10% of training.")
  define_export_tf1_checkpoint_flag()
  define_eval_during_training_flags()
  define_packing_flags()


def define_packing_flags():
  """--pack_sequences and --max_instances_per_row of fine-tuning (bert_tf.data.packing_finetune)."""
  _define("bool", "pack_sequences", False, "Pack several examples into each row of "
          "--max_seq_length (first fit; attention and positions stay inside each example, each "
          "is classified at its own [CLS]) in training, evaluation and prediction: the same "
          "losses, metrics and prediction files, less padding. --train_batch_size, "
          "--eval_batch_size and --predict_batch_size then count rows.")
  _define("integer", "max_instances_per_row", None, "With --pack_sequences: examples per row at "
          "most (default --max_seq_length / 8).")


def define_distillation_flags():
  """--teacher_dir and the distillation flags (bert_tf.jobs.distillation, docs/distillation.md)."""
  _define("string", "teacher_dir", None, "With --do_train: distil from this teacher, the "
          "output_dir of a fine-tuning run of the same task, labels and vocabulary (its best/ "
          "weights, else its latest checkpoint). It predicts once over the training data (and "
          "--transfer_file); its logits are kept in --output_dir and training reads them.")
  _define("float", "distill_temperature", 2.0, "With --teacher_dir: the softmax temperature T "
          "of the soft targets; their cross-entropy is scaled by T^2 (Hinton et al.).")
  _define("float", "distill_alpha", 0.5, "With --teacher_dir: the weight of the soft targets' "
          "term in the loss; the hard labels' term has 1 - this.")
  _define("string", "transfer_file", None, "With --teacher_dir: unlabelled examples the student "
          "also learns from the teacher's soft targets: run_classifier.py a text a line (a pair "
          "tab-separated for pair tasks); run_ner.py a word a line, a blank line between "
          "sentences.")
  _define("integer", "teacher_batch_size", 32, "With --teacher_dir: the teacher's batch size "
          "when it predicts.")


def define_eval_during_training_flags():
  """--eval_every_n_steps, --keep_best_metric, --early_stopping_patience (bert_tf.training.keep_best)."""
  _define("integer", "eval_every_n_steps", None, "With --do_train: evaluate on the dev set "
          "(run_squad.py: --predict_file, with answers) every this many steps and at the last "
          "step; the metrics go to TensorBoard (<output_dir>/eval) and one log line each time. "
          "Each evaluation step is also a checkpoint step.")
  _define("string", "keep_best_metric", None, "Keep the weights of the evaluation with the best "
          "value of this metric in <output_dir>/best/ (e.g. eval_accuracy, eval_f1, eval_mcc, "
          "eval_loss; run_squad.py: f1, exact_match, exact; the eval_ prefix may be left out): "
          "--do_eval, --do_predict and --export_dir then use them. Higher is better, lower for "
          "losses. Needs --eval_every_n_steps when training.")
  _define("integer", "early_stopping_patience", None, "Stop training after this many "
          "evaluations in a row without a new best --keep_best_metric (default metric: the "
          "task's main one: eval_accuracy, eval_mcc for CoLA, eval_f1 for MRPC, QQP and NER, "
          "eval_spearman for STS-B, f1 for SQuAD). Needs --eval_every_n_steps.")


def define_export_tf1_checkpoint_flag():
  _define("bool", "export_tf1_checkpoint", False, "After training, also write the final weights "
          "alone (heads included, no optimizer state) as an original-layout TF1 checkpoint, "
          "<output_dir>/bert_model.ckpt, beside bert_config.json and vocab.txt: what to keep when "
          "the model is all you want (the model.ckpt-N checkpoints also hold what resuming "
          "needs).")


def define_export_flags(with_dtype=False):
  _define("string", "export_dir", None, "Where to write a SavedModel of the fine-tuned model that "
          "takes raw text (export_savedmodel.py): each export is a new numbered version "
          "directory under it (TF Serving's layout, the newest served); nothing already there is "
          "replaced.")
  _define("bool", "tflite", False, "With --export_dir: also write the model (from token ids to "
          "its outputs) as TensorFlow Lite, <version>/assets.extra/model.tflite, float32 "
          "(--quantize adds an int8 one); "
          "bert_tf.serving.predictor.load(export_dir, backend='tflite') serves the task through "
          "it, faster than the SavedModel on CPUs (BENCHMARKS.md).")
  define_quantization_flags()
  if with_dtype:
    define_dtype_flag()


def define_quantization_flags():
  """The export's reduced precision (--quantize; --dtype=bfloat16 is the SavedModel's) and the
  accuracy check every reduced-precision export passes (bert_tf.serving.reduced)."""
  _define_enum("quantize", "none", list(finetune_options_lib.QUANTIZE), "With --tflite: also "
               "write an int8 TensorFlow Lite model, <version>/assets.extra/model_int8.tflite: "
               "dynamic (int8 weights, each matmul's input quantized on the fly) or int8 "
               "(calibrated on --calibration_examples training examples: int8 weights and matmul "
               "inputs, every other op in float32); with int8 and nncf installed, OpenVINO's int8 "
               "model too. Checked against float32 first (--max_quantization_loss).")
  _define("float", "max_quantization_loss", 0.5, "With --quantize or --dtype=bfloat16: the most a "
          "reduced-precision model may lose against float32, in points of the task's keep-best "
          "metric on its dev rows (or --quantization_check_file); beyond it the export is "
          "refused, in float32 only. Every figure goes into "
          "<version>/assets.extra/quantization.json.")
  _define("string", "quantization_check_file", None, "The held-out examples the reduced-precision "
          "check scores, in the format of the task's dev file (default: that file).")
  _define("integer", "calibration_examples", 200, "With --quantize=int8: how many training "
          "examples calibrate the int8 ranges.")
  _define("integer", "calibration_seed", 12345, "With --quantize=int8: the seed that draws the "
          "calibration examples.")


def define_options_flags(options_class, export=False, flag_values=FLAGS):
  """Defines the flags of a task's options dataclass: each field made with
  bert_tf.tasks.base.flag, under the field's name, with its default, help text and, for a
  string, its enum values; those of the run script, or with export, those of
  export_savedmodel.py (with their help text there). A flag already defined is left as it is."""
  hints = typing.get_type_hints(options_class)
  for field in dataclasses.fields(options_class):
    meta = field.metadata
    if "help" not in meta or not meta["export" if export else "run"]:
      continue
    if meta["group"]:
      _GROUP_OF[field.name] = meta["group"]
    if field.name in flag_values:
      continue
    help_text = meta["export"] if export and isinstance(meta["export"], str) else meta["help"]
    if meta["enum"]:
      flags.DEFINE_enum(field.name, field.default, list(meta["enum"]), help_text,
                        flag_values=flag_values)
    else:
      kind = _FLAG_KINDS[_without_optional(hints[field.name])]
      getattr(flags, f"DEFINE_{kind}")(field.name, field.default, help_text,
                                       flag_values=flag_values)


_FLAG_KINDS = {bool: "bool", int: "integer", float: "float", str: "string"}


def _without_optional(hint):
  """int of Optional[int]; the hint itself otherwise."""
  args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
  return args[0] if typing.get_origin(hint) is typing.Union and len(args) == 1 else hint


# ---------------------------------------------------------------------------------------- runtime


def define_dtype_flag():
  _define_enum("dtype", "float32", list(precision.CHOICES), "Compute precision: float32 (the "
          "original's), bfloat16 (mixed_bfloat16: bf16 compute, float32 variables; on a CPU "
          "without bfloat16 instructions it is emulated, slower than float32, and a warning "
          "says so), float16 (mixed_float16 with dynamic loss scaling) or auto: "
          f"{precision.AUTO_RULE}.")


def define_runtime_flags(training=True):
  """Strategy, precision and the TPU flags; with training, also seed, optimizer and the
  checkpoint / loop / logging cadence."""
  _define_enum("distribution_strategy", "one_device", list(STRATEGIES), "How to spread work "
          "over devices: one_device (GPU:0 if any, else CPU), mirrored (all local GPUs, or "
          "--num_gpus), multi_worker_mirrored (one process per worker, cluster from the TF_CONFIG "
          "environment variable) or tpu. --use_tpu implies tpu.")
  _define("integer", "num_gpus", None, "GPUs for --distribution_strategy=mirrored (default: all "
          "visible; 0 means the CPU).")
  define_dtype_flag()
  define_tpu_flags()
  if training:
    define_training_runtime_flags()


def define_training_runtime_flags():
  _define("bool", "use_xla", False, "Compile the train/eval steps with XLA (jit_compile).")
  _define("integer", "seed", 12345, "Seed of every random choice: initialization, dropout, input "
          "shuffling. The same flags give the same weights.")
  _define("bool", "deterministic", True, "Enable TF op determinism (bit-identical reruns and "
          "resumption; slightly slower on GPU).")
  _define_enum("optimizer", "adamw", list(OPTIMIZERS), "adamw: the original AdamWeightDecay; "
          "lamb: LAMB for large batches.")
  _define("bool", "adam_bias_correction", False, "With --optimizer=adamw, divide Adam's moments "
          "by (1 - beta^t) as torch's AdamW and Model Garden's AdamW do. The original does not: "
          "its early steps are larger (by up to 6.5x near step 12, 3x at step 100, 1.3x at step "
          "1,000). LAMB always corrects.")
  _define("integer", "gradient_accumulation_steps", 1, "Split each batch of --train_batch_size "
          "into this many micro-batches and apply their summed gradients once (same result, less "
          "memory).")
  _define_enum("clip_norm_rule", "original", list(options.CLIP_NORM_RULE_FLAGS),
               "How the global norm that gradients are clipped to (1.0) is counted. per_position: "
               "the word-embedding gradient as one row per looked-up position, a token seen k "
               "times adding |g1|^2 + ... + |gk|^2, as the original on CPU/GPU (its lookup is a "
               "gather); dense: the norm of the summed gradients, as the original with --use_tpu "
               "(one-hot lookups). original: whichever the original used on this device.")
  _define("integer", "save_checkpoints_steps", 1000, "How often to save the model checkpoint.")
  _define("integer", "keep_checkpoint_max", 5, "How many recent checkpoints to keep.")
  _define("integer", "iterations_per_loop", 1000, "How many steps to make in each estimator "
          "call: steps run inside one tf.function call between host-side work (logging, "
          "checkpoints).")
  _define("integer", "log_steps", 100, "Steps between progress lines and summaries.")


def define_tpu_flags():
  """The original's TPU flags."""
  _define("bool", "use_tpu", False, "Whether to use TPU or GPU/CPU.")
  _define("string", "tpu_name", None, "The Cloud TPU to use for training. This should be either "
          "the name used when creating the Cloud TPU, or a grpc://ip.address.of.tpu:8470 url.")
  _define("string", "tpu_zone", None, "[Optional] GCE zone where the Cloud TPU is located in. If "
          "not specified, we will attempt to automatically detect the GCE project from metadata.")
  _define("string", "gcp_project", None, "[Optional] Project name for the Cloud TPU-enabled "
          "project. If not specified, we will attempt to automatically detect the GCE project "
          "from metadata.")
  _define("string", "master", None, "[Optional] TensorFlow master URL.")
  _define("integer", "num_tpu_cores", 8, "Only used if `use_tpu` is True. Total number of TPU "
          "cores to use: a warning is logged when the TPU has another number of cores (all of "
          "them are used).")


# ---------------------------------------------------------------------------------------- masking


def define_masking_flags():
  """How tokens are chosen for the masked LM: create_pretraining_data.py's flags, which
  run_pretraining.py --dynamic_masking reads too (bert_tf.data.dynamic_masking)."""
  _define("bool", "do_whole_word_mask", False, "Whether to use whole word masking rather than "
          "per-WordPiece masking.")
  _define("float", "masked_lm_prob", 0.15, "Masked LM probability.")
  _define("float", "mask_prob_mask", 0.8, "Of the tokens chosen for prediction, the fraction "
          "replaced by [MASK] (the paper's Table 8 ablation). The three --mask_prob_* must sum "
          "to 1.")
  _define("float", "mask_prob_keep", 0.1, "Of the tokens chosen for prediction, the fraction left "
          "as they are.")
  _define("float", "mask_prob_random", 0.1, "Of the tokens chosen for prediction, the fraction "
          "replaced by a random vocab token.")


def define_unmasked_flag():
  _define("bool", "unmasked", False, "Write records without masks, for run_pretraining.py "
          "--dynamic_masking, which draws them at input time: input_ids (the text itself), "
          "input_mask, segment_ids and next_sentence_labels, no masked_lm_* features; "
          "--dupe_factor=1 then suffices. The masking flags are not used.")


def define_dynamic_masking_flags():
  define_masking_flags()
  _define("bool", "dynamic_masking", False, "Draw the masked-LM predictions at input time, fresh "
          "each time an instance is read (RoBERTa's dynamic masking), from records of "
          "create_pretraining_data.py --unmasked, with --masked_lm_prob, "
          "--max_predictions_per_seq, --do_whole_word_mask and --mask_prob_*; seeded by --seed, "
          "evaluation by a fixed seed. Needs --vocab_file.")
