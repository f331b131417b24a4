"""Typed options of fine-tuning, built at the door: run_classifier.py, run_swag.py, run_ner.py and
run_squad.py turn their parsed flags into one FinetuneOptions (bert_flags.finetune_options), and
the library reads that, never the flags object.

  options = bert_flags.finetune_options(glue.GlueTask, bert_flags.values())
  finetuning.run(glue.GlueTask, options)

FinetuneOptions holds what every fine-tuning script shares (model files, phases, batch sizes,
the schedule, packing, evaluation during training, export); `task` holds the task's own options
(the dataclass its Task class names as options_class, e.g. squad.SquadOptions); `runtime` where
and how TensorFlow runs and `loop` the training loop's settings (bert_tf.training.options' RuntimeOptions
and TrainLoopOptions, which bert_tf.training.loop reads).

Each rule on a value or a combination of values lives once, in __post_init__ beside the options
it constrains, and raises a one-line BertTfError naming the flag. A field a script has no flag
for keeps its default (None for the phase and head flags a script lacks: run_squad.py has no
--do_eval, run_swag.py no --bilstm_head).
"""
import dataclasses
from typing import Any, Optional

from bert_tf.errors import BertTfError
from bert_tf.errors import check_above_zero
from bert_tf.errors import check_at_least
from bert_tf.errors import check_choice
from bert_tf.errors import check_not_negative
from bert_tf.errors import check_fraction
from bert_tf.io import fileio


@dataclasses.dataclass(frozen=True)
class FinetuneOptions:
  """The options every fine-tuning run reads (see the module docstring)."""
  output_dir: str
  bert_config_file: str
  vocab_file: str
  init_checkpoint: Optional[str] = None
  do_lower_case: bool = True
  max_seq_length: int = 128
  # Phases: None where the script has no such flag.
  do_train: bool = False
  do_eval: Optional[bool] = None
  do_predict: Optional[bool] = None
  train_batch_size: int = 32
  eval_batch_size: Optional[int] = None
  predict_batch_size: int = 8
  learning_rate: float = 5e-5
  num_train_epochs: float = 3.0
  warmup_proportion: float = 0.1
  export_tf1_checkpoint: bool = False
  export_dir: Optional[str] = None
  tflite: bool = False  # --tflite: the model as TensorFlow Lite beside the export
  # Reduced precision in the export and its accuracy check (check_quantization's rules).
  quantize: str = "none"
  max_quantization_loss: float = 0.5
  quantization_check_file: Optional[str] = None
  calibration_examples: int = 200
  calibration_seed: int = 12345
  # The head: --left_to_right, --bilstm_head (None: the script has no such flag).
  left_to_right: bool = False
  bilstm_head: Optional[bool] = None
  bilstm_hidden_size: Optional[int] = None
  # --pack_sequences (bert_tf.data.packing_finetune).
  pack_sequences: bool = False
  max_instances_per_row: Optional[int] = None
  # Evaluation during training (bert_tf.training.keep_best).
  eval_every_n_steps: Optional[int] = None
  keep_best_metric: Optional[str] = None
  early_stopping_patience: Optional[int] = None
  task: Any = None  # the task's own options (its Task.options_class)
  runtime: Any = None  # bert_tf.training.options.RuntimeOptions (finetuning.run resolves --dtype=auto)
  loop: Any = None  # bert_tf.training.options.TrainLoopOptions
  distill: Any = None  # bert_tf.jobs.distillation.DistillOptions (--teacher_dir), or None

  def __post_init__(self):
    self._check_ranges()
    phases = self.phases()
    if not any(getattr(self, phase) for phase in phases):
      raise BertTfError(f"{'/'.join('--' + phase for phase in phases)}: at least one must be True")
    if self.bilstm_hidden_size and not self.bilstm_head:
      raise BertTfError("--bilstm_hidden_size: only with --bilstm_head")
    if self.tflite and not self.export_dir:
      raise BertTfError("--tflite: only with --export_dir (it writes beside the export)")
    check_quantization(self)
    if self.export_dir:
      fileio.check_output_directory(self.export_dir, "--export_dir")
    self._check_packing()
    self._check_evaluation()

  def _check_ranges(self):
    for flag in ("train_batch_size", "eval_batch_size", "predict_batch_size",
                 "eval_every_n_steps", "early_stopping_patience", "bilstm_hidden_size"):
      check_at_least(getattr(self, flag), flag, 1)  # None: the flag was not given
    check_above_zero(self.learning_rate, "learning_rate")
    check_above_zero(self.num_train_epochs, "num_train_epochs")
    check_fraction(self.warmup_proportion, "warmup_proportion")

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

  def phases(self):
    """The phase flags the script has (do_train, do_eval, do_predict)."""
    return [phase for phase in ("do_train", "do_eval", "do_predict")
            if getattr(self, phase) is not None]

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
    if self.bilstm_head is not None:
      shape["bilstm_head"] = bool(self.bilstm_head)
    if self.pack_sequences:
      shape["max_instances_per_row"] = self.max_instances_per_row
    return shape


@dataclasses.dataclass(frozen=True)
class ExportOptions:
  """export_savedmodel.py's options (bert_flags.export_options builds them from its flags), for
  export.run(task_class, options); `task` holds the task's own options (its options_class, with
  the flags it defines for export_savedmodel.py: the classifier's --task_name, NER's
  --label_file, SQuAD's server flags)."""
  bert_config_file: str
  vocab_file: str
  init_checkpoint: str
  export_dir: str
  do_lower_case: bool = True
  max_seq_length: int = 128
  dtype: str = "float32"
  tflite: bool = False
  quantize: str = "none"
  max_quantization_loss: float = 0.5
  quantization_check_file: Optional[str] = None
  calibration_examples: int = 200
  calibration_seed: int = 12345
  task: Any = None

  def __post_init__(self):
    check_quantization(self)


QUANTIZE = ("none", "dynamic", "int8")  # --quantize (bert_tf.serving.tflite.QUANTIZE)


def check_quantization(options):
  """The rules of the export's reduced-precision options (FinetuneOptions', ExportOptions')."""
  check_choice(options.quantize, "quantize", QUANTIZE)
  if options.quantize != "none" and not options.tflite:
    raise BertTfError("--quantize: only with --tflite (it quantizes the TensorFlow Lite model)")
  check_not_negative(options.max_quantization_loss, "max_quantization_loss")
  check_at_least(options.calibration_examples, "calibration_examples", 1)
