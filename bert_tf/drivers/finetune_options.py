"""Typed options of fine-tuning, built at the door: run_classifier.py, run_swag.py, run_ner.py and
run_squad.py define their flags from these fields and turn the parsed flags into one
FinetuneOptions (bert_flags.define_finetuning_flags, bert_flags.finetune_options), and the
library reads that, never the flags object.

  options = bert_flags.finetune_options(glue.GlueTask, bert_flags.values())
  finetuning.run(glue.GlueTask, options)

FinetuneOptions holds what every fine-tuning script shares (the model flags of
model_files.ModelOptions, phases, batch sizes, the schedule, packing, evaluation during training,
export); `task` holds the task's own options (the dataclass its Task class names as
options_class, e.g. squad.SquadOptions), which also says what the script lacks of the shared
flags (its LACKS: run_squad.py has no --do_eval, run_swag.py no --bilstm_head) and where its
defaults differ (DEFAULTS: run_squad.py's --max_seq_length); `runtime` where and how TensorFlow
runs and `loop` the training loop's settings (bert_tf.training.options' RuntimeOptions and
TrainLoopOptions, which bert_tf.training.loop reads); `distill` the distillation flags.

Each field says its flag once (bert_tf.options.option); each rule on a combination of values
lives in __post_init__ beside the options it constrains, and raises a one-line BertTfError naming
the flag.
"""
import dataclasses
import math
import os
from typing import Any, Optional

from bert_tf.errors import BertTfError
from bert_tf.io import fileio
from bert_tf.model.model_options import ModelOptions
from bert_tf.options import DATA
from bert_tf.options import MODEL
from bert_tf.options import OUTPUT
from bert_tf.options import TRAINING
from bert_tf.options import check_fields
from bert_tf.options import option

PHASES = ("do_train", "do_eval", "do_predict")
QUANTIZE = ("none", "dynamic", "int8")  # --quantize (bert_tf.serving.tflite.QUANTIZE)
MAX_SEQ_LENGTH_HELP = "The maximum total input sequence length after WordPiece tokenization. "


@dataclasses.dataclass(frozen=True)
class ExportFlags:
  """--export_dir, --tflite and the export's reduced precision: of export_savedmodel.py and of the
  fine-tuning scripts."""
  export_dir: Optional[str] = option(
      None, "Where to write a SavedModel of the fine-tuned model that takes raw text "
      "(export_savedmodel.py): each export is a new numbered version directory under it (TF "
      "Serving's layout, the newest served); nothing already there is replaced.", OUTPUT)
  tflite: bool = option(
      False, "With --export_dir: also write the model (from token ids to its outputs) as "
      "TensorFlow Lite, <version>/assets.extra/model.tflite, float32 (--quantize adds an int8 "
      "one); bert_tf.serving.predictor.load(export_dir, backend='tflite') serves the task "
      "through it (BENCHMARKS.md compares it with the SavedModel).", OUTPUT)
  # Reduced precision in the export, and the accuracy check it passes (bert_tf.serving.reduced).
  quantize: str = option(
      "none", "With --tflite: also write an int8 TensorFlow Lite model, "
      "<version>/assets.extra/model_int8.tflite: dynamic (int8 weights, each matmul's input "
      "quantized on the fly) or int8 (calibrated on --calibration_examples training examples: "
      "int8 weights and matmul inputs, every other op in float32); with int8 and nncf installed, "
      "OpenVINO's int8 model too. Checked against float32 first (--max_quantization_loss).",
      OUTPUT, choices=QUANTIZE)
  max_quantization_loss: float = option(
      0.5, "With --quantize or --dtype=bfloat16: the most a reduced-precision model may lose "
      "against float32, in points of the task's keep-best metric on its dev rows (or "
      "--quantization_check_file); beyond it the export is refused, in float32 only. Every "
      "figure goes into <version>/assets.extra/quantization.json.", OUTPUT, not_negative=True)
  quantization_check_file: Optional[str] = option(
      None, "The held-out examples the reduced-precision check scores, in the format of the "
      "task's dev file (default: that file).", OUTPUT)
  calibration_examples: int = option(200, "With --quantize=int8: how many training examples "
                                     "calibrate the int8 ranges.", OUTPUT, at_least=1)
  calibration_seed: int = option(12345, "With --quantize=int8: the seed that draws the "
                                 "calibration examples.", OUTPUT)

  def _check_export(self):
    if self.tflite and not self.export_dir:
      raise BertTfError("--tflite: only with --export_dir (it writes beside the export)")
    if self.quantize != "none" and not self.tflite:
      raise BertTfError("--quantize: only with --tflite (it quantizes the TensorFlow Lite model)")
    if self.export_dir:
      fileio.check_output_directory(self.export_dir, "--export_dir")


@dataclasses.dataclass(frozen=True)
class DistillOptions:
  """--teacher_dir, --distill_temperature, --distill_alpha, --transfer_file,
  --teacher_batch_size."""
  teacher_dir: Optional[str] = option(
      None, "With --do_train: distil from this teacher, the output_dir of a fine-tuning run of "
      "the same task, labels and vocabulary (its best/ weights, else its latest checkpoint). It "
      "predicts once over the training data (and --transfer_file); its logits are kept in "
      "--output_dir and training reads them.", TRAINING)
  distill_temperature: float = option(
      2.0, "With --teacher_dir: the softmax temperature T of the soft targets; their "
      "cross-entropy is scaled by T^2 (Hinton et al.).", TRAINING, above_zero=True)
  distill_alpha: float = option(
      0.5, "With --teacher_dir: the weight of the soft targets' term in the loss; the hard "
      "labels' term has 1 - this.", TRAINING, fraction=True)
  transfer_file: Optional[str] = option(
      None, "With --teacher_dir: unlabelled examples the student also learns from the teacher's "
      "soft targets: run_classifier.py a text a line (a pair tab-separated for pair tasks); "
      "run_ner.py a word a line, a blank line between sentences.")
  teacher_batch_size: int = option(32, "With --teacher_dir: the teacher's batch size when it "
                                   "predicts.", TRAINING, at_least=1)

  def __post_init__(self):
    check_fields(self)
    if not math.isfinite(self.distill_temperature):  # inf: every soft target uniform
      raise BertTfError(f"--distill_temperature: expected a finite number above 0, got "
                        f"{self.distill_temperature}")
    if self.transfer_file and not self.teacher_dir:
      raise BertTfError("--transfer_file: only with --teacher_dir (its examples have no labels: "
                        "the teacher's soft targets are all they teach)")
    if self.transfer_file and not fileio.exists(self.transfer_file):
      raise BertTfError(f"--transfer_file: {self.transfer_file} not found")

  def settings(self):
    """What a resumed run must keep: the loss's T and alpha, and the transfer set (its real path:
    the same file named through a link is the same)."""
    transfer = self.transfer_file
    return {"temperature": float(self.distill_temperature), "alpha": float(self.distill_alpha),
            "transfer_file": transfer and (transfer if fileio.is_url(transfer) else
                                           os.path.realpath(transfer))}



@dataclasses.dataclass(frozen=True)
class FinetuneOptions(ExportFlags, ModelOptions):
  """The options every fine-tuning run reads (see the module docstring)."""
  output_dir: Optional[str] = option(
      None, "The output directory where the model checkpoints and results will be written.",
      OUTPUT)
  max_seq_length: int = option(
      128, MAX_SEQ_LENGTH_HELP + "Sequences longer than this will be truncated, and sequences "
      "shorter than this will be padded.", DATA)
  do_train: bool = option(False, "Whether to run training.", TRAINING)
  do_eval: bool = option(False, "Whether to run eval on the dev set.", TRAINING)
  do_predict: bool = option(False, "Whether to run the model in inference mode on the test set.",
                            TRAINING)
  train_batch_size: int = option(32, "Total batch size for training.", TRAINING, at_least=1)
  eval_batch_size: int = option(8, "Total batch size for eval.", TRAINING, at_least=1)
  predict_batch_size: int = option(8, "Total batch size for predict.", TRAINING, at_least=1)
  learning_rate: float = option(5e-5, "The initial learning rate for Adam.", TRAINING,
                                above_zero=True)
  num_train_epochs: float = option(3.0, "Total number of training epochs to perform.", TRAINING,
                                   above_zero=True)
  warmup_proportion: float = option(
      0.1, "Proportion of training to perform linear learning rate warmup for. E.g., 0.1 = 10% "
      "of training.", TRAINING, fraction=True)
  export_tf1_checkpoint: bool = option(
      False, "After training, also write the final weights alone (heads included, no optimizer "
      "state) as an original-layout TF1 checkpoint, <output_dir>/bert_model.ckpt, beside "
      "bert_config.json and vocab.txt: what to keep when the model is all you want (the "
      "model.ckpt-N checkpoints also hold what resuming needs).", OUTPUT)
  # The head.
  left_to_right: bool = option(
      False, "Fine-tune a --left_to_right pre-trained model as the paper's Table 5 does: every "
      "position attends only to itself and its left, and a classifier reads the pooler at the "
      "last real token (the only one that has seen the whole input) instead of at [CLS]. The "
      "checkpoints say so: export_savedmodel.py and bert_tf.serving.predictor build the model "
      "the same way; a resumed run must pass it again.", MODEL)
  bilstm_head: bool = option(
      False, "Put a randomly initialized BiLSTM between BERT's sequence output and the task's "
      "output layer, trained with the rest of the model (the paper's Table 5 \"+ BiLSTM\", added "
      "on top of the left-to-right model). SQuAD's start/end and NER's tag logits read its "
      "outputs at each position; a classifier reads its final states (forward at the last "
      "token, backward at [CLS]) instead of the pooled [CLS] output. An exported SavedModel and "
      "bert_tf.serving.predictor include it.", MODEL)
  bilstm_hidden_size: Optional[int] = option(
      None, "With --bilstm_head: units per direction of the BiLSTM (its outputs are twice as "
      "wide). Default: the model's hidden_size (768 for BERT-Base), as the feature-based NER's "
      "--lstm_units.", MODEL, at_least=1)
  # --pack_sequences (bert_tf.data.packing_finetune).
  pack_sequences: bool = option(
      False, "Pack several examples into each row of --max_seq_length (first fit; attention and "
      "positions stay inside each example, each is classified at its own [CLS]) in training, "
      "evaluation and prediction: the same losses, metrics and prediction files, less padding. "
      "--train_batch_size, --eval_batch_size and --predict_batch_size then count rows.", TRAINING)
  max_instances_per_row: Optional[int] = option(
      None, "With --pack_sequences: examples per row at most (default --max_seq_length / 8).",
      TRAINING)
  # Evaluation during training (bert_tf.training.keep_best).
  eval_every_n_steps: Optional[int] = option(
      None, "With --do_train: evaluate on the dev set (run_squad.py: --predict_file, with "
      "answers) every this many steps and at the last step; the metrics go to TensorBoard "
      "(<output_dir>/eval) and one log line each time. Each evaluation step is also a "
      "checkpoint step.", TRAINING, at_least=1)
  keep_best_metric: Optional[str] = option(
      None, "Keep the weights of the evaluation with the best value of this metric in "
      "<output_dir>/best/ (e.g. eval_accuracy, eval_f1, eval_mcc, eval_loss; run_squad.py: f1, "
      "exact_match, exact; the eval_ prefix may be left out): --do_eval, --do_predict and "
      "--export_dir then use them. Higher is better, lower for losses. Needs "
      "--eval_every_n_steps when training.", TRAINING)
  early_stopping_patience: Optional[int] = option(
      None, "Stop training after this many evaluations in a row without a new best "
      "--keep_best_metric (default metric: the task's main one: eval_accuracy, eval_mcc for "
      "CoLA, eval_f1 for MRPC, QQP and NER, eval_spearman for STS-B, f1 for SQuAD). Needs "
      "--eval_every_n_steps.", TRAINING, at_least=1)
  task: Any = None  # the task's own options (its Task.options_class)
  runtime: Any = None  # bert_tf.training.options.RuntimeOptions (finetuning.run resolves --dtype=auto)
  loop: Any = None  # bert_tf.training.options.TrainLoopOptions
  distill: Any = None  # DistillOptions (--teacher_dir), or None where the task distils nothing

  def __post_init__(self):
    check_fields(self)
    phases = self.phases()
    if not any(getattr(self, phase) for phase in phases):
      raise BertTfError(f"{'/'.join('--' + phase for phase in phases)}: at least one must be True")
    if self.bilstm_hidden_size and not self.bilstm_head:
      raise BertTfError("--bilstm_hidden_size: only with --bilstm_head")
    self._check_export()
    self._check_packing()
    self._check_evaluation()

  def _check_packing(self):
    if not self.pack_sequences:
      if self.max_instances_per_row:
        raise BertTfError("--max_instances_per_row: only with --pack_sequences")
      return
    if self.bilstm_head:
      raise BertTfError("--pack_sequences: not with --bilstm_head (its LSTM would read across the "
                        "examples of a row)")
    if self.left_to_right:
      raise BertTfError("--pack_sequences: not with --left_to_right (its classifier pools each "
                        "example's last token, where packed rows pool each example's [CLS])")

  def _check_evaluation(self):
    every, metric = self.eval_every_n_steps, self.keep_best_metric
    if every is not None and not self.do_train:
      raise BertTfError("--eval_every_n_steps: evaluates during training, needs --do_train")
    if self.early_stopping_patience is not None and every is None:
      raise BertTfError("--early_stopping_patience: needs --eval_every_n_steps")
    if metric is not None and self.do_train and every is None:
      raise BertTfError("--keep_best_metric: needs --eval_every_n_steps when training")

  @property
  def dtype(self):
    """The compute precision (--dtype, as the runtime resolved it): an export's."""
    return self.runtime.dtype

  def has_flag(self, name):
    """Whether the script has the shared flag `name` (its task's options say what it lacks)."""
    return name not in getattr(type(self.task), "LACKS", ())

  def phases(self):
    """The phase flags the script has (do_train, do_eval, do_predict)."""
    return [phase for phase in PHASES if self.has_flag(phase)]

  @property
  def eval_split_batch_size(self):
    """The batch size of evaluation: --eval_batch_size, or --predict_batch_size in a script
    that evaluates its prediction split (run_squad.py's --predict_file)."""
    return self.eval_batch_size if self.has_flag("eval_batch_size") else self.predict_batch_size

  def bilstm_units(self, config):
    """Units per direction of the --bilstm_head BiLSTM (default --bilstm_hidden_size: the
    encoder's hidden_size), or None without --bilstm_head."""
    return (self.bilstm_hidden_size or config.hidden_size) if self.bilstm_head else None

  def head_options(self, config):
    """The task model's keyword arguments: bilstm_units (--bilstm_head) and causal
    (--left_to_right)."""
    return {"bilstm_units": self.bilstm_units(config), "causal": bool(self.left_to_right)}

  def run_shape(self):
    """The options that change what a fine-tuning run's checkpoints hold or how its input is
    read (its train.tf_record, the packed rows): resuming the run needs the same (run_dir)."""
    shape = {"max_seq_length": self.max_seq_length, "pack_sequences": bool(self.pack_sequences),
             "left_to_right": bool(self.left_to_right)}
    if self.has_flag("bilstm_head"):
      shape["bilstm_head"] = bool(self.bilstm_head)
    if self.pack_sequences:
      shape["max_instances_per_row"] = self.max_instances_per_row
    return shape


@dataclasses.dataclass(frozen=True)
class ExportOptions(ExportFlags, ModelOptions):
  """export_savedmodel.py's options (bert_flags.export_options builds them from its flags), for
  exporting.run(task_class, options); `task` holds the task's own options (its options_class, with
  the flags it defines for export_savedmodel.py: the classifier's --task_name, NER's
  --label_file, SQuAD's server flags)."""
  max_seq_length: int = option(128, MAX_SEQ_LENGTH_HELP + "Longer inputs are truncated as in "
                               "training.", DATA)
  dtype: str = "float32"  # --dtype: a RuntimeOptions field of the script
  task: Any = None

  def __post_init__(self):
    check_fields(self)
    self._check_export()
