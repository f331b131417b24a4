"""The typed options of the runtime and the training loop, which every training script hands the
library beside its job's own (bert_tf.drivers: FinetuneOptions, PretrainingOptions): small frozen
dataclasses whose fields are the flags (bert_tf.options: name, default, help, range and group
said once), each combination rule checked beside the options it constrains (BertTfError naming
the flag).

TensorFlow-free, so that bad flags fail before TensorFlow's runtime starts. bert_tf.cli.flags builds
them from the parsed flags (runtime_options, train_loop_options, ...); a test or a notebook builds
them directly:

  RuntimeOptions(distribution_strategy="one_device", use_tpu=False, tpu_name=None, tpu_zone=None,
                 gcp_project=None, master=None, num_gpus=None, num_tpu_cores=8, dtype="float32",
                 seed=12345, deterministic=True, use_xla=False, worker_timeout_seconds=300)
      where and how TensorFlow runs (bert_tf.training.runtime.setup_runtime; a job that does not
      train seeds nothing). .strategy_name: tpu with use_tpu, else distribution_strategy.
  TrainLoopOptions(optimizer="adamw", adam_bias_correction=False, gradient_accumulation_steps=1,
                   save_checkpoints_steps=1000, keep_checkpoint_max=5, iterations_per_loop=1000,
                   log_steps=100, clip_norm_rule="original")
      the loop's choices that the flags give as they are (bert_tf.training.loop.train reads them).
  Schedule(num_train_steps, learning_rate, num_warmup_steps=0, train_batch_size=None)
      how long and how fast training goes, as a job works it out from its options.
"""
import dataclasses
from typing import Optional

from bert_tf.options import OUTPUT
from bert_tf.options import RUNTIME
from bert_tf.options import TPU
from bert_tf.options import TRAINING as TRAINING_GROUP
from bert_tf.options import check_fields
from bert_tf.options import option
from bert_tf.training import precision

STRATEGIES = ("one_device", "mirrored", "multi_worker_mirrored", "tpu")
OPTIMIZERS = ("adamw", "lamb")
CLIP_NORM_RULE_FLAGS = ("original", "per_position", "dense")


@dataclasses.dataclass(frozen=True)
class RuntimeOptions:
  """Strategy, TPU, precision, seed and compilation: the runtime flags. A script that does not
  train lacks the training ones (TRAINING)."""
  TRAINING = ("seed", "deterministic", "use_xla")

  distribution_strategy: str = option(
      "one_device", "How to spread work over devices: one_device (GPU:0 if any, else CPU), "
      "mirrored (all local GPUs, or --num_gpus), multi_worker_mirrored (one process per worker, "
      "cluster from the TF_CONFIG environment variable) or tpu. --use_tpu implies tpu.", RUNTIME,
      choices=STRATEGIES)
  use_tpu: bool = option(False, "Whether to use TPU or GPU/CPU.", TPU)
  tpu_name: Optional[str] = option(
      None, "The Cloud TPU to use for training. This should be either the name used when "
      "creating the Cloud TPU, or a grpc://ip.address.of.tpu:8470 url.", TPU)
  tpu_zone: Optional[str] = option(
      None, "[Optional] GCE zone where the Cloud TPU is located in. If not specified, we will "
      "attempt to automatically detect the GCE project from metadata.", TPU)
  gcp_project: Optional[str] = option(
      None, "[Optional] Project name for the Cloud TPU-enabled project. If not specified, we "
      "will attempt to automatically detect the GCE project from metadata.", TPU)
  master: Optional[str] = option(None, "[Optional] TensorFlow master URL.", TPU)
  num_gpus: Optional[int] = option(
      None, "GPUs for --distribution_strategy=mirrored (default: all visible; 0 means the CPU).",
      RUNTIME, not_negative=True)
  num_tpu_cores: int = option(
      8, "Only used if `use_tpu` is True. Total number of TPU cores to use: a warning is logged "
      "when the TPU has another number of cores (all of them are used).", TPU, at_least=1)
  dtype: str = option(
      "float32", "Compute precision: float32 (the original's), bfloat16 (mixed_bfloat16: bf16 "
      "compute, float32 variables; on a CPU without bfloat16 instructions it is emulated, slower "
      f"than float32, and a warning says so), float16 (mixed_float16 with dynamic loss scaling) "
      f"or auto: {precision.AUTO_RULE}.", RUNTIME, choices=precision.CHOICES)
  seed: Optional[int] = option(
      12345, "Seed of every random choice: initialization, dropout, input shuffling. The same "
      "flags give the same weights.", TRAINING_GROUP)
  deterministic: bool = option(
      True, "Enable TF op determinism (bit-identical reruns and resumption; slightly slower on "
      "GPU).", RUNTIME)
  use_xla: bool = option(False, "Compile the train/eval steps with XLA (jit_compile).", RUNTIME)
  worker_timeout_seconds: float = option(
      300.0, "With --distribution_strategy=multi_worker_mirrored: how long the workers wait for one "
      "that has not started, and at most for one that stopped answering (killed, its machine "
      "lost), before the run ends with a line naming it.", RUNTIME, above_zero=True)

  def __post_init__(self):
    check_fields(self)

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
  optimizer: str = option("adamw", "adamw: the original AdamWeightDecay; lamb: LAMB for large "
                          "batches.", TRAINING_GROUP, choices=OPTIMIZERS)
  adam_bias_correction: bool = option(
      False, "With --optimizer=adamw, divide Adam's moments by (1 - beta^t) as torch's AdamW and "
      "Model Garden's AdamW do. The original does not: its early steps are larger (by up to 6.5x "
      "near step 12, 3x at step 100, 1.3x at step 1,000). LAMB always corrects.", TRAINING_GROUP)
  gradient_accumulation_steps: int = option(
      1, "Split each batch of --train_batch_size into this many micro-batches and apply their "
      "summed gradients once (same result, less memory).", TRAINING_GROUP, at_least=1)
  save_checkpoints_steps: int = option(1000, "How often to save the model checkpoint.", OUTPUT,
                                       at_least=1)
  keep_checkpoint_max: int = option(5, "How many recent checkpoints to keep.", OUTPUT,
                                    not_negative=True)
  iterations_per_loop: int = option(
      1000, "How many steps to make in each estimator call: steps run inside one tf.function "
      "call between host-side work (logging, checkpoints).", RUNTIME, at_least=1)
  log_steps: int = option(100, "Steps between progress lines and summaries.", OUTPUT,
                          at_least=1)
  clip_norm_rule: str = option(
      "original", "How the global norm that gradients are clipped to (1.0) is counted. "
      "per_position: the word-embedding gradient as one row per looked-up position, a token seen "
      "k times adding |g1|^2 + ... + |gk|^2, as the original on CPU/GPU (its lookup is a gather); "
      "dense: the norm of the summed gradients, as the original with --use_tpu (one-hot lookups). "
      "original: whichever the original used on this device.", TRAINING_GROUP,
      choices=CLIP_NORM_RULE_FLAGS)

  def __post_init__(self):
    check_fields(self)


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
