"""run_pretraining.py's typed options, built at the door (bert_flags.pretraining_options) beside the
RuntimeOptions and TrainLoopOptions of bert_tf.training.options:

  PretrainingOptions(input_file, bert_config_file, output_dir, ..., objective=Objective())
      files, phases, sizes, the schedule and the objective (bert_tf.model.objectives: masked LM,
      next sentence, their ablations and the masking).

TensorFlow-free, so that bad flags fail before TensorFlow's runtime starts; each rule on a value
lives once, in __post_init__, and raises a one-line BertTfError naming the flag. --max_seq_length
is checked against the model's config as bert_tf.jobs.pretraining.run reads it, before TensorFlow
starts (bert_tf.model.config.check_max_seq_length).
"""
import dataclasses
from typing import Optional

from bert_tf.errors import BertTfError
from bert_tf.errors import check_above_zero
from bert_tf.errors import check_at_least
from bert_tf.errors import check_not_negative
from bert_tf.model import objectives
from bert_tf.training.options import Schedule


@dataclasses.dataclass(frozen=True)
class PretrainingOptions:
  """run_pretraining.py's own flags: files, phases, sizes and the objective (bert_tf.model.objectives);
  the runtime and the loop come as RuntimeOptions and TrainLoopOptions beside it."""
  input_file: str
  bert_config_file: str
  output_dir: str
  init_checkpoint: Optional[str] = None
  vocab_file: Optional[str] = None
  max_seq_length: int = 128
  do_train: bool = False
  do_eval: bool = False
  train_batch_size: int = 32
  eval_batch_size: int = 8
  learning_rate: float = 5e-5
  num_train_steps: int = 100000
  num_warmup_steps: int = 10000
  max_eval_steps: int = 100
  export_tf1_checkpoint: bool = False
  pack_sequences: bool = False
  max_instances_per_row: Optional[int] = None
  max_predictions_per_row: Optional[int] = None
  objective: objectives.Objective = objectives.Objective()
  given: Optional[frozenset] = None  # the flags the user gave (None: all that have a value)

  def __post_init__(self):
    if not self.do_train and not self.do_eval:
      raise BertTfError("--do_train/--do_eval: at least one of them must be True")
    for flag in ("train_batch_size", "eval_batch_size", "num_train_steps", "max_eval_steps"):
      check_at_least(getattr(self, flag), flag, 1)
    check_above_zero(self.learning_rate, "learning_rate")
    check_not_negative(self.num_warmup_steps, "num_warmup_steps")
    if self.objective.masking.dynamic and not self.vocab_file:
      raise BertTfError("--dynamic_masking: needs --vocab_file (the records' vocabulary: [MASK], "
                        "random replacements and, for whole words, the \"##\" pieces)")

  @property
  def schedule(self):
    """The bert_tf.training.options.Schedule of --num_train_steps, --learning_rate,
    --num_warmup_steps and --train_batch_size."""
    return Schedule(self.num_train_steps, self.learning_rate, self.num_warmup_steps,
                    self.train_batch_size)

  @property
  def max_predictions_per_seq(self):
    return self.objective.masking.max_predictions_per_seq
