"""OpenVINO for CPU inference, where the `openvino` package is installed: an export's model.tflite
(or the int8 model NNCF made of it) run by OpenVINO's CPU plugin, in place of TensorFlow Lite.

OpenVINO reads TensorFlow Lite files itself (core.read_model), and on a CPU with bfloat16
instructions (avx512_bf16, amx_bf16) it computes the same float32 model in bfloat16 when asked
(its INFERENCE_PRECISION_HINT), which TensorFlow Lite cannot. Its int8 model is NNCF's
post-training quantization of that file (nncf.quantize, transformer preset: the matmuls in int8,
the softmax, layer norms and GELU not), calibrated on inputs of the task, which export writes
beside model.tflite (export --quantize=int8 where nncf is installed too).

  runner = openvino_runner.Runner(tflite_path, precision="bfloat16")  # or "float32"
  runner = openvino_runner.Runner(tflite_path, ir_path=int8_xml)      # NNCF's int8 model
  runner(input_ids, input_mask, segment_ids)     # -> {output key: float32 numpy array}
  tflite.ServingModel(runner)                    # a task server's model, as TensorFlow Lite's

The runner has TensorFlow Lite's Runner's interface (its passes of tokens_per_pass tokens too), so
every task's server runs around it unchanged. Output keys are the TensorFlow Lite file's signature
keys, which OpenVINO's tensor names do not carry: they are read from the file's signature.
Without `openvino`, require() raises one BertTfError line saying so.
"""
import ast
import contextlib
import importlib.util
import io
import logging
import os
import tempfile
import warnings
from xml.etree import ElementTree

import numpy as np
import tensorflow as tf

from bert_tf.errors import BertTfError
from bert_tf.serving import tflite
from bert_tf.training import machine

# OpenVINO's INFERENCE_PRECISION_HINT of each dtype the backend serves; int8 models keep their
# int8 matmuls whatever the hint, which sets the precision of the other ops (INT8_HINT).
HINTS = {"float32": "f32", "bfloat16": "bf16"}
# The hint of an int8 model's other ops: bfloat16 where the CPU has it (its softmax, layer norms
# and GELU then run in bfloat16, as OpenVINO itself does by default on such a CPU), else float32.
INT8_HINT = "bfloat16"


@contextlib.contextmanager
def _root_handlers_kept():
  """Puts back the root logger's handlers that OpenVINO's converter removes when it is imported
  (openvino.tools.ovc.logger takes absl's off the root: absl would then print every library's
  INFO lines in Python's default format)."""
  before = list(logging.root.handlers)
  try:
    yield
  finally:
    for handler in before:
      if handler not in logging.root.handlers:
        logging.root.addHandler(handler)


def require(what="backend='openvino'"):
  """The openvino module; a BertTfError naming `what` when it is not installed."""
  try:
    with _root_handlers_kept():
      import openvino  # pylint: disable=g-import-not-at-top
      import openvino.tools.ovc  # noqa: F401  pylint: disable=g-import-not-at-top  (see there)
  except ImportError:
    raise BertTfError(f"{what}: needs the openvino package, which is not installed in this "
                      f"Python (pip install openvino)") from None
  return openvino


def available():
  """Whether openvino can be imported here."""
  try:
    require()
  except BertTfError:
    return False
  return True


def nncf_available():
  """Whether nncf (OpenVINO's post-training quantization) is installed here (found, not imported:
  its import takes seconds)."""
  return importlib.util.find_spec("nncf") is not None


_CORE = []


def core():
  """The process's one openvino.Core (it holds the CPU plugin and its thread pool)."""
  if not _CORE:
    _CORE.append(require().Core())
  return _CORE[0]


def cpu_has_bf16():
  """Whether OpenVINO's CPU plugin computes bfloat16 natively on this CPU."""
  return "BF16" in core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")


# x86's int8 dot-product instructions. OpenVINO's int8 is fast where the CPU has them. On an
# AVX2-only CPU without them its int8 model ran at 0.7x its own float32, and TensorFlow Lite's int8
# served the same export 1.6-1.8x faster than it (BENCHMARKS.md, openvino-avx2).
VNNI_FLAGS = ("avx_vnni", "avx512_vnni", "amx_int8")


def lacks_vnni(flags):
  """Whether an x86 CPU's flags (machine.cpu's) have AVX2 and none of VNNI_FLAGS; False where
  they are unknown (empty) or not x86's."""
  return "avx2" in flags and flags.isdisjoint(VNNI_FLAGS)


def int8_warning(cpuinfo):
  """The one-line warning for int8 asked of backend='openvino' on an AVX2-only CPU (flags known
  from /proc/cpuinfo's text; AVX-512 without VNNI was not measured), else None."""
  flags = machine.cpu(text=cpuinfo)["flags"]
  if not lacks_vnni(flags) or "avx512f" in flags:
    return None
  return ("dtype=int8 on backend='openvino' on a CPU without int8 dot products (AVX2, no "
          "avx_vnni, avx512_vnni or amx_int8 in /proc/cpuinfo): OpenVINO's int8 runs slower than "
          "its float32 here; backend='tflite' (or auto) serves int8 faster on this machine")


def check_precision(dtype, what="dtype"):
  """A BertTfError unless `dtype` is one OpenVINO serves here (bfloat16 needs the CPU's
  bfloat16 instructions: elsewhere it would compute in float32)."""
  if dtype not in (*HINTS, "int8"):
    raise BertTfError(f"{what}: backend='openvino' serves float32, bfloat16 and int8, not "
                      f"{dtype!r}")
  if dtype == "bfloat16" and not cpu_has_bf16():
    raise BertTfError(f"{what}: bfloat16 on backend='openvino' needs a CPU with bfloat16 "
                      f"instructions (avx512_bf16 or amx_bf16), which this one lacks: it would "
                      f"compute in float32")


def signature_names(tflite_path):
  """({feature: tensor name}, {output key: tensor name}) of a .tflite file's signature: the
  names OpenVINO gives the model's inputs and outputs."""
  with warnings.catch_warnings():  # "tf.lite.Interpreter is deprecated": TF 2.20 still has it
    warnings.simplefilter("ignore")
    interpreter = tf.lite.Interpreter(model_path=tflite_path)
  run = interpreter.get_signature_runner()
  return ({key: d["name"] for key, d in run.get_input_details().items()},
          {key: d["name"] for key, d in run.get_output_details().items()})


def read_model(tflite_path):
  """The .tflite file as an openvino.Model whose inputs are named as FEATURES and outputs by
  their signature keys (NNCF and save_model keep those names)."""
  inputs, outputs = signature_names(tflite_path)
  model = core().read_model(tflite_path)
  by_name = {name: key for key, name in {**inputs, **outputs}.items()}
  for port in list(model.inputs) + list(model.outputs):
    key = next((by_name[name] for name in port.get_names() if name in by_name), None)
    if key is None:
      raise BertTfError(f"{tflite_path}: OpenVINO found a tensor {port.get_any_name()} that the "
                        f"file's signature does not name")
    port.get_tensor().set_names({key})
  return model


class Runner:
  """Runs an export's model in OpenVINO on numpy ids, as tflite.Runner does in TensorFlow Lite:
  the float32 model of tflite_path (precision float32 or bfloat16), or with ir_path NNCF's int8
  model of it (an OpenVINO IR .xml beside its .bin)."""

  def __init__(self, tflite_path, precision="float32", ir_path=None, num_threads=None,
               tokens_per_pass=tflite.TOKENS_PER_PASS):
    model = core().read_model(ir_path) if ir_path else read_model(tflite_path)
    hint = HINTS[INT8_HINT if ir_path and cpu_has_bf16() else
                 "float32" if ir_path else precision]
    self.precision = "int8" if ir_path else precision
    self.tokens_per_pass = tokens_per_pass
    num_threads = num_threads or len(os.sched_getaffinity(0))
    compiled = core().compile_model(model, "CPU", {
        "INFERENCE_PRECISION_HINT": hint, "INFERENCE_NUM_THREADS": num_threads,
        "PERFORMANCE_HINT": "LATENCY"})
    self._request = compiled.create_infer_request()
    self._outputs = {port.get_any_name(): port for port in compiled.outputs}

  def output_details(self):
    """{output key: {"shape_signature": [...]}} (-1 where dynamic), as tflite.Runner's."""
    return {key: {"shape_signature": [d.get_length() if d.is_static else -1
                                      for d in port.get_partial_shape()]}
            for key, port in self._outputs.items()}

  def _run(self, **arrays):
    results = self._request.infer(arrays)
    return {key: np.array(results[port], np.float32) for key, port in self._outputs.items()}

  def __call__(self, input_ids, input_mask, segment_ids):
    """{output key: float32 numpy array} for int [B, T] numpy ids."""
    arrays = [np.ascontiguousarray(a, dtype=np.int32)
              for a in (input_ids, input_mask, segment_ids)]
    return tflite.in_passes(self._run, arrays, self.tokens_per_pass)


def overflow_fix(cpuinfo):
  """NNCF's overflow fix for an int8 model made on this CPU. Without VNNI, OpenVINO multiplies
  int8 in pairs whose 16-bit sums saturate (vpmaddubsw): the tiny test model's scores then moved
  by up to 0.39 (median 0.11) on an AVX2-only CPU. "enable" quantizes every matmul's weights to
  half the int8 range, which keeps the sums in (there: up to 0.11, median 0.015); with VNNI, the
  full range but for the first layer (NNCF's default)."""
  return "enable" if lacks_vnni(machine.cpu(text=cpuinfo)["flags"]) else "first_layer_only"


def made_overflow_fix(xml_path):
  """The overflow fix NNCF quantized an int8 model with ("enable", "first_layer_only",
  "disable"), as its IR's rt_info records NNCF's parameters; None where it records none."""
  try:
    node = ElementTree.parse(xml_path).getroot().find(
        "rt_info/nncf/quantization/advanced_parameters")
    return ast.literal_eval(node.get("value")).get("overflow_fix")
  # No such node, or not NNCF's dict (ElementTree's ParseError is a SyntaxError).
  except (OSError, AttributeError, ValueError, SyntaxError):
    return None


def saturation_reason(xml_path, cpuinfo):
  """Why an int8 model's accuracy check does not hold on this CPU (one line), or None. A model
  quantized with the full int8 range (NNCF's default, as on a CPU with VNNI) may saturate its
  int8 sums on a CPU without VNNI, which the check, run where it was made, never saw: this CPU
  needs the fix that overflow_fix would give a model made on it, and the model lacks it."""
  if overflow_fix(cpuinfo) != "enable" or made_overflow_fix(xml_path) == "enable":
    return None
  return (f"backend='openvino' dtype=int8: {xml_path} was quantized without NNCF's overflow fix "
          f"(the full int8 range, as on a CPU with int8 dot products), and this CPU has none "
          f"(no avx_vnni, avx512_vnni or amx_int8 in /proc/cpuinfo): its int8 sums may saturate "
          f"here, which the export's accuracy check did not see; export it again on this kind "
          f"of CPU, or serve backend='tflite' (max_quantization_loss=None serves it unchecked)")


def quantize_int8(tflite_path, calibration):
  """{file name: bytes} of NNCF's int8 model of the .tflite file (an OpenVINO IR, model.xml and
  model.bin), calibrated on `calibration` (tflite.convert's: {feature: int32 [1, T]} each)."""
  try:
    with _root_handlers_kept():
      import nncf  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise BertTfError("OpenVINO int8: needs the nncf package, which is not installed in this "
                      "Python (pip install nncf)") from None
  ov = require()
  model = read_model(tflite_path)
  fix = nncf.OverflowFix(overflow_fix(machine.read_cpuinfo()))
  data = nncf.Dataset([{name: np.asarray(f[name], np.int32) for name in tflite.FEATURES}
                       for f in calibration])
  # Without NNCF's INFO lines and its progress bars (rich's, on stdout).
  with _root_handlers_kept(), contextlib.redirect_stdout(io.StringIO()):
    nncf.set_log_level(logging.WARNING)
    quantized = nncf.quantize(model, data, model_type=nncf.ModelType.TRANSFORMER,
                              subset_size=len(calibration),
                              advanced_parameters=nncf.AdvancedQuantizationParameters(
                                  overflow_fix=fix))
  with tempfile.TemporaryDirectory() as tmp:
    # compress_to_fp16=False: the float32 constants (the embeddings) stay float32, as computed.
    ov.save_model(quantized, os.path.join(tmp, "model.xml"), compress_to_fp16=False)
    files = {}
    for name in ("model.xml", "model.bin"):
      with open(os.path.join(tmp, name), "rb") as f:
        files[name] = f.read()
  return files
