"""The typed options of the runtime and the training loop, which every training script hands the
library beside its job's own (bert_tf.jobs: FinetuneOptions, PretrainingOptions): small frozen
dataclasses, each range or combination rule checked once, beside the option it constrains
(BertTfError naming the flag: bert_tf.errors.check).

TensorFlow-free, so that bad flags fail before TensorFlow's runtime starts. bert_tf.cli.flags builds
them from the parsed flags (runtime_options, train_loop_options, ...); a test or a notebook builds
them directly:

  RuntimeOptions(distribution_strategy="one_device", use_tpu=False, tpu_name=None, tpu_zone=None,
                 gcp_project=None, master=None, num_gpus=None, num_tpu_cores=8, dtype="float32",
                 seed=None, deterministic=True, use_xla=False, worker_timeout_seconds=300)
      where and how TensorFlow runs (bert_tf.training.runtime.setup_runtime); seed None: a script without
      the training flags, which seeds nothing. .strategy_name: tpu with use_tpu, else
      distribution_strategy.
  TrainLoopOptions(optimizer="adamw", adam_bias_correction=False, gradient_accumulation_steps=1,
                   save_checkpoints_steps=1000, keep_checkpoint_max=5, iterations_per_loop=1000,
                   log_steps=100, clip_norm_rule="original")
      the loop's choices that the flags give as they are (bert_tf.training.loop.train reads them).
  Schedule(num_train_steps, learning_rate, num_warmup_steps=0, train_batch_size=None)
      how long and how fast training goes, as a job works it out from its options.
"""
import dataclasses
from typing import Optional

from bert_tf.errors import check_above_zero
from bert_tf.errors import check_at_least
from bert_tf.errors import check_choice
from bert_tf.errors import check_not_negative
from bert_tf.training import precision

STRATEGIES = ("one_device", "mirrored", "multi_worker_mirrored", "tpu")
OPTIMIZERS = ("adamw", "lamb")
CLIP_NORM_RULE_FLAGS = ("original", "per_position", "dense")


@dataclasses.dataclass(frozen=True)
class RuntimeOptions:
  """Strategy, TPU, precision, seed and compilation: the runtime flags."""
  distribution_strategy: str = "one_device"
  use_tpu: bool = False
  tpu_name: Optional[str] = None
  tpu_zone: Optional[str] = None
  gcp_project: Optional[str] = None
  master: Optional[str] = None
  num_gpus: Optional[int] = None
  num_tpu_cores: int = 8
  dtype: str = "float32"
  seed: Optional[int] = None
  deterministic: bool = True
  use_xla: bool = False
  # multi_worker_mirrored: the bound on waiting for a worker that never starts or is lost.
  worker_timeout_seconds: float = 300.0

  def __post_init__(self):
    check_choice(self.distribution_strategy, "distribution_strategy", STRATEGIES)
    check_above_zero(self.worker_timeout_seconds, "worker_timeout_seconds")
    check_choice(self.dtype, "dtype", precision.CHOICES)
    if self.num_gpus is not None:
      check_not_negative(self.num_gpus, "num_gpus")
    check_at_least(self.num_tpu_cores, "num_tpu_cores", 1)

  @property
  def strategy_name(self):
    """--distribution_strategy, or tpu with --use_tpu (the original's flag)."""
    return "tpu" if self.use_tpu else self.distribution_strategy

  @property
  def trim_padding(self):
    """Whether task models may run each batch at its longest sequence: not where shapes are
    compiled statically (XLA, TPU)."""
    return not self.use_xla and self.strategy_name != "tpu"


@dataclasses.dataclass(frozen=True)
class TrainLoopOptions:
  """The optimizer and the loop's cadence: the training runtime flags."""
  optimizer: str = "adamw"
  adam_bias_correction: bool = False
  gradient_accumulation_steps: int = 1
  save_checkpoints_steps: int = 1000
  keep_checkpoint_max: int = 5
  iterations_per_loop: int = 1000
  log_steps: int = 100
  clip_norm_rule: str = "original"

  def __post_init__(self):
    check_choice(self.optimizer, "optimizer", OPTIMIZERS)
    check_choice(self.clip_norm_rule, "clip_norm_rule", CLIP_NORM_RULE_FLAGS)
    for flag in ("gradient_accumulation_steps", "save_checkpoints_steps", "iterations_per_loop",
                 "log_steps"):
      check_at_least(getattr(self, flag), flag, 1)
    check_not_negative(self.keep_checkpoint_max, "keep_checkpoint_max")


@dataclasses.dataclass(frozen=True)
class Schedule:
  """How long and how fast training goes, as a job works it out from its options (run_pretraining.py:
  --num_train_steps, --num_warmup_steps; a fine-tuning script: its epochs over the training set
  and --warmup_proportion): num_train_steps optimizer steps of train_batch_size examples (None:
  not said, no examples/s), the learning rate warmed up linearly over num_warmup_steps, then
  decayed linearly to 0 (bert_tf.training.optimization). The options it comes from checked the
  values."""
  num_train_steps: int
  learning_rate: float
  num_warmup_steps: int = 0
  train_batch_size: Optional[int] = None
