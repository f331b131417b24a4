"""run_pretraining.py's typed options, built at the door (bert_flags.pretraining_options) beside the
RuntimeOptions and TrainLoopOptions of bert_tf.training.options:

  PretrainingOptions(input_file=..., bert_config_file=..., output_dir=..., objective=Objective())
      files, phases, sizes, the schedule and the objective (bert_tf.model.objectives: masked LM,
      next sentence, their ablations and the masking).

TensorFlow-free, so that bad flags fail before TensorFlow's runtime starts; each rule on a value
lives once, in __post_init__, and raises a one-line BertTfError naming the flag. --max_seq_length
is checked against the model's config as bert_tf.drivers.pretraining.run reads it, before TensorFlow
starts (bert_tf.model.config.check_max_seq_length).
"""
import dataclasses
from typing import Optional

from bert_tf.errors import BertTfError
from bert_tf.model import objectives
from bert_tf.model.model_options import ModelOptions
from bert_tf.options import MODEL
from bert_tf.options import OUTPUT
from bert_tf.options import TRAINING
from bert_tf.options import check_fields
from bert_tf.options import option
from bert_tf.training.options import Schedule


@dataclasses.dataclass(frozen=True)
class PretrainingOptions(ModelOptions):
  """run_pretraining.py's own flags: files, phases, sizes and the objective (bert_tf.model.objectives);
  the runtime and the loop come as RuntimeOptions and TrainLoopOptions beside it."""
  LACKS = ("do_lower_case",)  # the records are tokenized already
  HELP = {"max_predictions_per_seq": "Maximum number of masked LM predictions per sequence. "
                                     "Must match data generation."}

  input_file: Optional[str] = option(None, "Input TF example files (can be a glob or comma "
                                     "separated).")
  output_dir: Optional[str] = option(None, "The output directory where the model checkpoints "
                                     "and results will be written.", OUTPUT)
  vocab_file: Optional[str] = option(
      None, "The vocabulary of the records (create_pretraining_data.py's --vocab_file), copied "
      "into --output_dir as vocab.txt so that it is a complete model directory. Optional, but "
      "for --dynamic_masking.", MODEL)
  max_seq_length: int = option(
      128, "The maximum total input sequence length after WordPiece tokenization. Sequences "
      "longer than this will be truncated, and sequences shorter than this will be padded. Must "
      "match data generation.")
  do_train: bool = option(False, "Whether to run training.", TRAINING)
  do_eval: bool = option(False, "Whether to run eval on the dev set.", TRAINING)
  train_batch_size: int = option(32, "Total batch size for training.", TRAINING, at_least=1)
  eval_batch_size: int = option(8, "Total batch size for eval.", TRAINING, at_least=1)
  learning_rate: float = option(5e-5, "The initial learning rate for Adam.", TRAINING,
                                above_zero=True)
  num_train_steps: int = option(100000, "Number of training steps.", TRAINING, at_least=1)
  num_warmup_steps: int = option(10000, "Number of warmup steps.", TRAINING, not_negative=True)
  max_eval_steps: int = option(100, "Maximum number of eval steps.", TRAINING, at_least=1)
  export_tf1_checkpoint: bool = option(
      False, "After training, also write the final weights alone (heads included, no optimizer "
      "state) as an original-layout TF1 checkpoint, <output_dir>/bert_model.ckpt, beside "
      "bert_config.json and vocab.txt: what to keep when the model is all you want (the "
      "model.ckpt-N checkpoints also hold what resuming needs).", OUTPUT)
  pack_sequences: bool = option(
      False, "Pack several instances of the records into each row of --max_seq_length at input "
      "time (attention, positions, masked-LM predictions and next sentence labels stay per "
      "instance; --train_batch_size and --eval_batch_size count rows). Same losses, less "
      "padding.", TRAINING)
  max_instances_per_row: Optional[int] = option(
      None, "With --pack_sequences: instances per row at most (default: max(2, --max_seq_length "
      "/ 16)).", TRAINING)
  max_predictions_per_row: Optional[int] = option(
      None, "With --pack_sequences: masked-LM predictions per row at most (default: "
      "max(--max_predictions_per_seq, 0.15 x --max_seq_length) + --max_instances_per_row / 2; "
      "--max_seq_length with --left_to_right). An instance that does not fit starts a new row.")
  objective: objectives.Objective = objectives.Objective()

  def __post_init__(self):
    check_fields(self)
    if not self.do_train and not self.do_eval:
      raise BertTfError("--do_train/--do_eval: at least one of them must be True")
    if self.objective.masking.dynamic_masking and not self.vocab_file:
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
