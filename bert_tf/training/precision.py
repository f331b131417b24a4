"""Compute precision: the --dtype choices, the Keras policy each sets, and what --dtype=auto picks.

  PRECISIONS   {"float32": "float32", "bfloat16": "mixed_bfloat16", "float16": "mixed_float16"}:
               each concrete --dtype and its tf_keras mixed-precision policy
  CHOICES      the values --dtype takes: PRECISIONS and "auto"
  AUTO_RULE    --dtype=auto's rule, as --help states it
  cpu_bf16_flags(cpuinfo)                   the bfloat16 instructions /proc/cpuinfo's text names
  choose(dtype, device, compute_capabilities, cpuinfo, timings=None) -> (dtype, why or None)
      the concrete dtype and, for auto, why; pure (no TensorFlow), so tests can pass any
      device, CPU flags and measured step times
  emulation_warning(dtype, device, cpuinfo) -> the one-line warning or None
  resolve(dtype, strategy=None, cpuinfo=None, warn=True, config=None, seq_length=128) -> the
      concrete dtype, with the choice (auto) and the warning logged; the device is the
      strategy's (none: the first visible GPU, else the CPU); config and seq_length: the model
      whose layer the CPU probe times (default: BERT-Base's sizes)

A CPU without bfloat16 instructions computes bfloat16 by converting to and from float32 around
float32 arithmetic: slower than float32 itself (BENCHMARKS.md, mrpc-bf16), so
there auto takes float32 without measuring. A CPU with them (avx512_bf16 / amx_bf16 on x86, bf16
on Arm) is not always faster in bfloat16 either (an avx512_bf16 Xeon trained BERT-Base at 0.6x
float32's speed): there auto times a training step of the model's layer in both
(bert_tf.training.dtype_probe, cached per machine) and takes bfloat16 only when it is at least
MIN_BF16_SPEEDUP faster. TPUs and GPUs of compute capability 8.0 and up (Ampere, Hopper, ...)
compute bfloat16 natively. float16 needs loss scaling and is never chosen.
"""
from absl import logging

from bert_tf.errors import BertTfError
from bert_tf.training import machine
from bert_tf.training import dtype_probe

PRECISIONS = {"float32": "float32", "bfloat16": "mixed_bfloat16", "float16": "mixed_float16"}
CHOICES = (*PRECISIONS, "auto")
# x86 flags (Cooper Lake, Sapphire Rapids, Zen 4 and later) and the Arm feature (Graviton3, ...).
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")
AUTO_RULE = ("bfloat16 on a TPU and on GPUs of compute capability 8.0 or more (A100, H100, L4, "
             "RTX 30xx and later); on a CPU with bfloat16 instructions (avx512_bf16 or amx_bf16 "
             "in /proc/cpuinfo; bf16 on Arm) bfloat16 only where a training step of the model's "
             "layer, timed in both at start-up (cached per machine), is at least 10% faster in "
             "it; float32 elsewhere; the log says which it chose and why")
MIN_BF16_COMPUTE_CAPABILITY = (8, 0)
# How much faster the probed bfloat16 step must be on a CPU: a margin for the probe's noise and
# for what one layer leaves out (embeddings, heads and the optimizer stay float32).
MIN_BF16_SPEEDUP = 1.1


def cpu_bf16_flags(cpuinfo):
  """The bfloat16 instructions the text of /proc/cpuinfo names (its x86 `flags` or Arm
  `Features` lines), sorted; None when the text names no flags at all (no /proc/cpuinfo)."""
  if not cpuinfo:
    return None
  found, any_flags = set(), False
  for line in cpuinfo.splitlines():
    key, _, value = line.partition(":")
    if key.strip() in ("flags", "Features"):
      any_flags = True
      found.update(flag for flag in value.split() if flag in BF16_CPU_FLAGS)
  return sorted(found) if any_flags else None


def _check(dtype):
  if dtype not in CHOICES:
    raise BertTfError(f"--dtype: {dtype!r} is not one of {', '.join(CHOICES)}")


def choose(dtype, device, compute_capabilities=(), cpuinfo="", timings=None):
  """(the concrete dtype, why) for --dtype on `device` ("cpu", "gpu" or "tpu"); why is None
  unless dtype is "auto". compute_capabilities: the GPUs' (major, minor), all of which must
  reach 8.0 for bfloat16. timings: on a CPU with bfloat16 instructions, (float32 seconds,
  bfloat16 seconds) of the probed training step (None: not measured, float32)."""
  _check(dtype)
  if dtype != "auto":
    return dtype, None
  if device == "tpu":
    return "bfloat16", "a TPU computes in bfloat16 natively"
  if device == "gpu":
    capabilities = ", ".join(f"{major}.{minor}" for major, minor in compute_capabilities)
    if compute_capabilities and min(compute_capabilities) >= MIN_BF16_COMPUTE_CAPABILITY:
      return "bfloat16", (f"GPU compute capability {capabilities} (8.0 or more has bfloat16 "
                          "tensor cores)")
    return "float32", (f"GPU compute capability {capabilities or 'unknown'} is under 8.0: no "
                       "bfloat16 tensor cores (--dtype=float16, with loss scaling, may be faster "
                       "there)")
  flags = cpu_bf16_flags(cpuinfo)
  if flags:
    return _choose_measured(" and ".join(flags), timings)
  if flags is None:
    return "float32", "no GPU or TPU in use, and the CPU's instruction flags are unknown"
  return "float32", ("no GPU or TPU in use, and the CPU has no bfloat16 instructions (no "
                     "avx512_bf16 or amx_bf16): bfloat16 would be emulated, slower than float32")


def _choose_measured(flags, timings):
  """auto on a CPU with bfloat16 instructions (`flags`): bfloat16 where the probed step was at
  least MIN_BF16_SPEEDUP faster in it."""
  has = f"no GPU or TPU in use; the CPU has {flags}"
  if not timings:
    return "float32", f"{has}, but bfloat16's speed here was not measured"
  float32, bfloat16 = timings
  speedup = float32 / bfloat16 if bfloat16 > 0 else 0.0
  measured = (f"a training step of the model's layer took {1e3 * bfloat16:.0f} ms in bfloat16 "
              f"and {1e3 * float32:.0f} ms in float32 ({speedup:.2f}x)")
  if speedup >= MIN_BF16_SPEEDUP:
    return "bfloat16", f"{has}, and {measured}"
  return "float32", f"{has}, but {measured}: bfloat16 must be {MIN_BF16_SPEEDUP:.1f}x to pay"


def emulation_warning(dtype, device, cpuinfo, name="--dtype"):
  """The one-line warning for bfloat16 asked by `name` (a flag, or the predictor's argument) on a
  CPU that would emulate it (its flags known and without bfloat16 instructions, no GPU or TPU in
  use), else None. Emulated, BERT ran at 0.39-0.52x float32's speed (BENCHMARKS.md)."""
  if dtype != "bfloat16" or device != "cpu" or cpu_bf16_flags(cpuinfo) != []:
    return None
  return (f"{name}=bfloat16 on a CPU without bfloat16 instructions (no avx512_bf16 or amx_bf16 in "
          f"/proc/cpuinfo) and no GPU or TPU in use: bfloat16 is emulated here and runs slower than "
          f"float32; {name}=float32 (or auto) is faster on this machine")


def device_in_use(strategy=None):
  """("tpu" | "gpu" | "cpu", the GPUs' compute capabilities) for a tf.distribute strategy, or
  without one for TensorFlow's default placement (the first GPU when there is one)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  if strategy is not None and isinstance(strategy, tf.distribute.TPUStrategy):
    return "tpu", ()
  if strategy is not None:
    uses_gpu = any("GPU" in d.upper() for d in strategy.extended.worker_devices)
  else:
    uses_gpu = bool(tf.config.list_logical_devices("GPU"))
  if not uses_gpu:
    return "cpu", ()
  capabilities = []
  for gpu in tf.config.list_physical_devices("GPU"):
    capability = tf.config.experimental.get_device_details(gpu).get("compute_capability")
    if capability:
      capabilities.append(tuple(capability))
  return "gpu", tuple(capabilities)


def resolve(dtype, strategy=None, cpuinfo=None, warn=True, config=None, seq_length=128):
  """The concrete dtype for --dtype on the device in use; logs auto's choice and why, and (with
  warn) warns when bfloat16 would be emulated. cpuinfo: /proc/cpuinfo's text (read when None).
  config, seq_length: the model (a BertConfig; default BERT-Base's sizes) whose layer auto times
  on a CPU with bfloat16 instructions."""
  _check(dtype)
  if dtype != "auto" and not (warn and dtype == "bfloat16"):
    return dtype
  device, capabilities = device_in_use(strategy)
  cpuinfo = machine.read_cpuinfo() if cpuinfo is None else cpuinfo
  timings = None
  if dtype == "auto" and device == "cpu" and cpu_bf16_flags(cpuinfo):
    timings, where = _probe(config, seq_length, cpuinfo)
  chosen, why = choose(dtype, device, capabilities, cpuinfo, timings)
  if why:
    if timings:
      why += f"; {where}"
    logging.info("--dtype=auto: %s (%s)", chosen, why)
  warning = emulation_warning(chosen, device, cpuinfo) if warn else None
  if warning:
    logging.warning(warning)
  return chosen


def _probe(config, seq_length, cpuinfo):
  """((float32, bfloat16) seconds of dtype_probe's step, where they come from)."""
  if config is None:
    from bert_tf.model.config import BertConfig  # pylint: disable=g-import-not-at-top
    config = BertConfig(vocab_size=30522)  # BERT-Base's sizes are BertConfig's defaults
  float32, bfloat16, cached = dtype_probe.timings(config, seq_length, cpuinfo,
                                                 cpu_bf16_flags(cpuinfo))
  path = dtype_probe.choices().path
  return (float32, bfloat16), (f"measured on this machine before, cached in {path}" if cached
                               else f"measured now, cached in {path}")
