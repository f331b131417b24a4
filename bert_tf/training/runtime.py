"""Where and how TensorFlow runs: the distribution strategy, the precision policy and the seed, set
up from a bert_tf.training.options.RuntimeOptions.

  strategy = setup_runtime(options)
      the strategy, after which precision, seed and determinism are set. Call it before any other
      TensorFlow op: multi_worker_mirrored must be created first. concrete_dtype() then says which
      dtype --dtype=auto chose.
  strategy = get_strategy(distribution_strategy="one_device", num_gpus=None, tpu_name=None,
                          tpu_zone=None, gcp_project=None, master=None)
      one of STRATEGIES: one_device | mirrored | multi_worker_mirrored | tpu.
  set_precision(dtype, strategy=None)
      dtype: float32 | bfloat16 | float16 (loss-scaled) | auto (bert_tf.training.precision); returns the
      concrete one
  set_seed(seed, deterministic=True)
      seeds Python/NumPy/TF, enables op determinism and makes dropout layers draw from
      tf.random.Generator objects, whose state the training loop checkpoints (exact resume).
  strategy_name(options), trim_padding(options)
      the strategy's name (tpu with --use_tpu); whether task models may trim each batch's padding
"""
from absl import logging
import tensorflow as tf
import tf_keras

from bert_tf.errors import BertTfError
from bert_tf.training.options import STRATEGIES
from bert_tf.training import peers
from bert_tf.training import precision

__all__ = ["STRATEGIES", "get_strategy", "set_precision", "set_seed", "strategy_name",
           "setup_runtime", "trim_padding", "concrete_dtype"]


def get_strategy(distribution_strategy="one_device", num_gpus=None, tpu_name=None, tpu_zone=None,
                 gcp_project=None, master=None,
                 worker_timeout_seconds=peers.DEFAULT_TIMEOUT_SECONDS):
  """The tf.distribute.Strategy named by --distribution_strategy (multi_worker_mirrored: ended
  within worker_timeout_seconds when a worker never starts or is lost: bert_tf.training.peers)."""
  if distribution_strategy not in STRATEGIES:
    raise BertTfError(f"--distribution_strategy: {distribution_strategy!r} is not one of "
                      f"{STRATEGIES}")
  if distribution_strategy == "tpu":
    tpu = tpu_name or master or ""
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu, zone=tpu_zone,
                                                                  project=gcp_project)
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)
  if distribution_strategy == "multi_worker_mirrored":
    return peers.multi_worker_strategy(worker_timeout_seconds)
  gpus = [d.name for d in tf.config.list_logical_devices("GPU")]
  if distribution_strategy == "one_device":
    return tf.distribute.OneDeviceStrategy(gpus[0] if gpus and num_gpus != 0 else "/cpu:0")
  if num_gpus is None:
    devices = gpus
  elif num_gpus > len(gpus):
    raise BertTfError(f"--num_gpus: {num_gpus} requested but {len(gpus)} GPU(s) are visible")
  else:
    devices = gpus[:num_gpus]
  # Without GPUs, mirror over the logical CPU devices (tests split the CPU into two).
  devices = devices or [d.name for d in tf.config.list_logical_devices("CPU")]
  return tf.distribute.MirroredStrategy(devices)


def set_precision(dtype, strategy=None, cpuinfo=None, config=None, seq_length=128):
  """Sets the global Keras policy (bfloat16 and float16 compute with float32 variables) for
  --dtype, "auto" resolved for the strategy's devices and the model (a BertConfig) at seq_length
  (bert_tf.training.precision.resolve, which also warns when bfloat16 would be emulated);
  returns the concrete dtype."""
  dtype = precision.resolve(dtype, strategy, cpuinfo, config=config, seq_length=seq_length)
  tf_keras.mixed_precision.set_global_policy(precision.PRECISIONS[dtype])
  return dtype


def concrete_dtype():
  """The concrete --dtype the global Keras policy says (what set_precision chose)."""
  policy = tf_keras.mixed_precision.global_policy().name
  return {name: dtype for dtype, name in precision.PRECISIONS.items()}.get(policy, "float32")


def set_seed(seed, deterministic=True):
  """Seeds everything; with `deterministic`, the same flags give bit-identical weights."""
  tf_keras.utils.set_random_seed(seed)
  if deterministic:
    tf.config.experimental.enable_op_determinism()
  # Dropout then draws from tf.random.Generator variables, which are checkpointed, so a resumed
  # run draws the same masks as one that was never stopped.
  tf_keras.backend.experimental.enable_tf_random_generator()


def strategy_name(options):
  """--distribution_strategy, or tpu with --use_tpu (the original's flag); options: a
  RuntimeOptions."""
  return options.strategy_name


def trim_padding(options):
  """Whether task models may run each batch at its longest sequence: not where shapes are compiled
  statically (XLA, TPU); options: a RuntimeOptions."""
  return options.trim_padding


def setup_runtime(options, config=None, seq_length=128, seeded=True):
  """The strategy for a RuntimeOptions, after which precision, seed and determinism are set
  (seeded=False: a job that does not train, and has no --seed, seeds nothing). Call before any
  other TensorFlow op: multi_worker_mirrored must be created first. The concrete dtype
  (--dtype=auto resolved, for the model of `config` at seq_length) is concrete_dtype() from here
  on."""
  strategy = get_strategy(options.strategy_name, num_gpus=options.num_gpus,
                          tpu_name=options.tpu_name, tpu_zone=options.tpu_zone,
                          gcp_project=options.gcp_project, master=options.master,
                          worker_timeout_seconds=options.worker_timeout_seconds)
  if (isinstance(strategy, tf.distribute.TPUStrategy) and options.num_tpu_cores and
      strategy.num_replicas_in_sync != options.num_tpu_cores):
    logging.warning("--num_tpu_cores=%d, but the TPU has %d cores: all of them are used",
                    options.num_tpu_cores, strategy.num_replicas_in_sync)
  set_precision(options.dtype, strategy, config=config, seq_length=seq_length)
  if seeded and options.seed is not None:
    set_seed(options.seed, deterministic=options.deterministic)
  return strategy
