"""Compute precision: the --dtype choices, the Keras policy each sets, and what --dtype=auto picks.

  PRECISIONS   {"float32": "float32", "bfloat16": "mixed_bfloat16", "float16": "mixed_float16"}:
               each concrete --dtype and its tf_keras mixed-precision policy
  CHOICES      the values --dtype takes: PRECISIONS and "auto"
  AUTO_RULE    --dtype=auto's rule, as --help states it
  cpu_bf16_flags(cpuinfo)                   the bfloat16 instructions /proc/cpuinfo's text names
  choose(dtype, device, compute_capabilities, cpuinfo) -> (dtype, why or None)
      the concrete dtype and, for auto, why; pure (no TensorFlow), so tests can pass any
      device and CPU flags
  emulation_warning(dtype, device, cpuinfo) -> the one-line warning or None
  resolve(dtype, strategy=None, cpuinfo=None, warn=True) -> the concrete dtype, with the choice
      (auto) and the warning logged; the device is the strategy's (none: the first visible GPU,
      else the CPU)

A CPU without bfloat16 instructions computes bfloat16 by converting to and from float32 around
float32 arithmetic: slower than float32 itself (BENCHMARKS.md, mrpc-bf16), so
bfloat16 pays only on TPUs, GPUs of compute capability 8.0 and up (Ampere, Hopper, ...) and CPUs
with avx512_bf16 / amx_bf16 (x86) or bf16 (Arm). float16 needs loss scaling and is never chosen.
"""
from absl import logging

from bert_tf.errors import BertTfError

PRECISIONS = {"float32": "float32", "bfloat16": "mixed_bfloat16", "float16": "mixed_float16"}
CHOICES = (*PRECISIONS, "auto")
# x86 flags (Cooper Lake, Sapphire Rapids, Zen 4 and later) and the Arm feature (Graviton3, ...).
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")
AUTO_RULE = ("bfloat16 on a TPU, on GPUs of compute capability 8.0 or more (A100, H100, L4, "
             "RTX 30xx and later) and on CPUs with bfloat16 instructions (avx512_bf16 or "
             "amx_bf16 in /proc/cpuinfo; bf16 on Arm), float32 elsewhere; the log says which it "
             "chose and why")
MIN_BF16_COMPUTE_CAPABILITY = (8, 0)


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


def read_cpuinfo(path="/proc/cpuinfo"):
  """The text of /proc/cpuinfo, or "" where there is none (macOS, Windows)."""
  try:
    with open(path, encoding="utf-8", errors="replace") as f:
      return f.read()
  except OSError:
    return ""


def _check(dtype):
  if dtype not in CHOICES:
    raise BertTfError(f"--dtype: {dtype!r} is not one of {', '.join(CHOICES)}")


def choose(dtype, device, compute_capabilities=(), cpuinfo=""):
  """(the concrete dtype, why) for --dtype on `device` ("cpu", "gpu" or "tpu"); why is None
  unless dtype is "auto". compute_capabilities: the GPUs' (major, minor), all of which must
  reach 8.0 for bfloat16."""
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
    return "bfloat16", f"no GPU or TPU in use, and the CPU has {' and '.join(flags)}"
  if flags is None:
    return "float32", "no GPU or TPU in use, and the CPU's instruction flags are unknown"
  return "float32", ("no GPU or TPU in use, and the CPU has no bfloat16 instructions (no "
                     "avx512_bf16 or amx_bf16): bfloat16 would be emulated, slower than float32")


def emulation_warning(dtype, device, cpuinfo):
  """The one-line warning for --dtype=bfloat16 on a CPU that would emulate it (its flags known
  and without bfloat16 instructions, no GPU or TPU in use), else None."""
  if dtype != "bfloat16" or device != "cpu" or cpu_bf16_flags(cpuinfo) != []:
    return None
  return ("--dtype=bfloat16 on a CPU without bfloat16 instructions (no avx512_bf16 or amx_bf16 in "
          "/proc/cpuinfo) and no GPU or TPU in use: bfloat16 is emulated here and runs slower than "
          "float32; --dtype=float32 (or auto) is faster on this machine")


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


def resolve(dtype, strategy=None, cpuinfo=None, warn=True):
  """The concrete dtype for --dtype on the device in use; logs auto's choice and why, and (with
  warn) warns when bfloat16 would be emulated. cpuinfo: /proc/cpuinfo's text (read when None)."""
  _check(dtype)
  if dtype != "auto" and not (warn and dtype == "bfloat16"):
    return dtype
  device, capabilities = device_in_use(strategy)
  cpuinfo = read_cpuinfo() if cpuinfo is None else cpuinfo
  chosen, why = choose(dtype, device, capabilities, cpuinfo)
  if why:
    logging.info("--dtype=auto: %s (%s)", chosen, why)
  warning = emulation_warning(chosen, device, cpuinfo) if warn else None
  if warning:
    logging.warning(warning)
  return chosen
