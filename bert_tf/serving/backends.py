"""Which backend runs the predictor's model on this machine: measured on it, not assumed.

An export made with --tflite can be served two ways in float32, its SavedModel (TensorFlow, with
oneDNN where bert_tf.training.machine.prefer_onednn turned it on) or its model.tflite (TensorFlow Lite's
XNNPACK), and which is faster depends on the CPU: TensorFlow Lite was 1.2-1.6x faster on an
AVX2-only AMD EPYC, 1.29-1.34x slower on an AVX-512 Intel Xeon (BENCHMARKS.md). So backend="auto"
times both on the export's own shapes (inputs of max_seq_length words, at batch 1 and at the
predictor's batch_size, the two taking turns) and takes the one whose worst slowdown against the
other is least. The choice is kept per export file, CPU, threads, TensorFlow version, oneDNN
setting, dtype and batch_size in the user's cache (machine.Choices("backends"), never in the
export, which may be read-only), so only the first load on a machine pays for the timing. Every
load says its backend and why in one log line; a backend asked for by name is used as asked.

A third backend, openvino, runs the export's model.tflite in OpenVINO where the `openvino` package
is installed (bert_tf.serving.openvino_runner). auto never times it for float32: float32 is
served by the backends that compute it as the model was trained (MEASURED). A reduced precision
is the user's trade, asked for with dtype: "bfloat16" (the SavedModel of an export made with
--dtype=bfloat16, OpenVINO on a CPU with bfloat16 instructions) or "int8" (the --quantize model
in TensorFlow Lite, OpenVINO's int8 model); auto then times the backends that serve it here and
that the export's accuracy check accepted (guard.accepted; max_quantization_loss), the same way.
The check holds only where the model computes as it did: OpenVINO's int8 model quantized with the
full int8 range is refused on a CPU without VNNI (openvino_runner.saturation_reason).
"""
import os
import time

from absl import logging
import tensorflow as tf

from bert_tf.errors import BertTfError
from bert_tf.io import fileio
from bert_tf.training import machine
from bert_tf.model import activations
from bert_tf.serving import export
from bert_tf.serving import guard
from bert_tf.serving import openvino_runner

BACKENDS = ("auto", "savedmodel", "tflite", "openvino")
MEASURED = ("savedmodel", "tflite")  # the float32 backends auto times
DTYPES = ("float32", "bfloat16", "float16", "int8")  # predictor.load's dtype values
# Timed calls of each backend per batch size (after one untimed call each); the least is kept,
# which the load from other processes raises least.
ROUNDS = {"small": 3, "large": 2}


def check_dtype(dtype):
  if dtype is not None and dtype not in (*DTYPES, "auto"):
    raise BertTfError(f"dtype: expected one of {', '.join(DTYPES)}, auto (an output_dir's: "
                      f"--dtype=auto's choice) or None (the export's own), got {dtype!r}")


def saved_dtype(version):
  """The precision of an export's SavedModel: float32 unless it was made with --dtype=bfloat16
  (its quantization.json says so; exports before that file are read as float32)."""
  doc = guard.read_records(version)
  return (doc or {}).get("savedmodel_dtype", "float32")


def _files(backend, dtype):
  """The export files that backend serving dtype reads."""
  if backend == "savedmodel":
    return ["saved_model.pb"]
  if dtype == "int8":
    return ([export.TFLITE_INT8_FILE] if backend == "tflite" else
            [export.TFLITE_FILE, *export.OPENVINO_INT8_FILES.values()])
  return [export.TFLITE_FILE]


def unavailable(version, backend, dtype, max_loss=guard.MAX_LOSS):
  """Why `backend` cannot serve the export version in `dtype` here (one line), or None."""
  if backend == "savedmodel":
    saved = saved_dtype(version)
    if dtype != saved:
      return (f"backend='savedmodel': {version} holds a {saved} SavedModel, not {dtype} "
              f"(export_savedmodel.py --dtype={dtype} makes one)" if dtype in ("bfloat16",
                                                                               "float16") else
              f"backend='savedmodel': {version} holds a {saved} SavedModel, not {dtype}")
  elif backend == "tflite" and dtype in ("bfloat16", "float16"):
    return (f"backend='tflite': TensorFlow Lite computes float32 or int8 on a CPU, not {dtype} "
            f"(backend='openvino', or a SavedModel exported with --dtype={dtype})")
  elif backend == "openvino":
    openvino_runner.require()
    openvino_runner.check_precision(dtype)
    if fileio.is_url(version):
      return f"backend='openvino': reads an export on local disk, not {version}"
  missing = [name for name in _files(backend, dtype)
             if not tf.io.gfile.exists(os.path.join(version, name))]
  if missing:
    how = ("--tflite --quantize=int8" + (" where nncf is installed" if backend == "openvino"
                                          else "") if dtype == "int8" else "--tflite")
    return f"backend='{backend}': {version} holds no {missing[0]} (export with {how})"
  if dtype == "float32":
    return None
  if (backend, dtype) == ("openvino", "int8") and max_loss is not None:
    reason = openvino_runner.saturation_reason(
        os.path.join(version, export.OPENVINO_INT8_FILES["model.xml"]), machine.read_cpuinfo())
    if reason:
      return reason
  return guard.accepted(version, backend, dtype, max_loss)


def for_output_dir(path, backend, dtype="float32"):
  """The backend of a fine-tuning output_dir's in-memory server; auto: savedmodel (converting the
  model to TensorFlow Lite would cost every load more than it saves a typical one), logged. Its
  reduced precisions are an export's (the export checks them against float32)."""
  if backend == "openvino" or dtype == "int8":
    raise BertTfError(f"{'backend=openvino' if backend == 'openvino' else 'dtype=int8'}: serves "
                      f"an export (export_savedmodel.py --tflite"
                      f"{' --quantize=int8' if dtype == 'int8' else ''}), not the output_dir "
                      f"{path}")
  if backend == "tflite" and dtype != "float32":
    raise BertTfError(f"backend='tflite': an output_dir's model is converted in float32, not "
                      f"{dtype}")
  if backend == "auto":
    _log(path, "savedmodel", dtype, "auto, an output_dir: TensorFlow Lite would convert the "
                                    "model on every load; ask for backend='tflite', or load an "
                                    "export made with --tflite")
    return "savedmodel"
  _log(path, backend, dtype, "asked for")
  return backend


def pick(version, backend, batch_size, open_backend, dtype=None, max_loss=guard.MAX_LOSS,
         choices=None):
  """The predictor of an export's version directory that `backend` names in `dtype` (None: the
  SavedModel's own), open_backend(name, dtype) making it; auto: the backend measured fastest
  here among those that serve dtype (see the module docstring), each opened and timed when no
  choice is kept for this export and machine. A backend that cannot serve is a BertTfError
  saying why. choices: a machine.Choices (default: the user's cache)."""
  dtype = dtype or saved_dtype(version)
  if backend != "auto":
    reason = unavailable(version, backend, dtype, max_loss)
    if reason:
      raise BertTfError(reason)
    _log(version, backend, dtype, "asked for")
    return open_backend(backend, dtype)
  names = MEASURED if dtype == "float32" else BACKENDS[1:]
  reasons = {name: _reason(version, name, dtype, max_loss) for name in names}
  usable = [name for name in names if reasons[name] is None]
  if not usable:
    raise BertTfError(f"dtype={dtype!r}: no backend serves {version} in {dtype} here: "
                      f"{'; '.join(reasons.values())}")
  if len(usable) == 1:
    others = "; ".join(reason for reason in reasons.values() if reason)
    _log(version, usable[0], dtype, f"auto, the only backend for {dtype} here ({others})")
    return open_backend(usable[0], dtype)
  choices = choices or machine.Choices("backends")
  key = measure_key(version, batch_size, dtype, usable)
  kept = choices.get(key, check=lambda value: _kept(value, batch_size, usable))
  if kept:
    _log(version, kept["backend"], dtype, f"auto, timed before on this machine: "
                                          f"{_describe(kept['seconds'])} (kept in {choices.path})")
    return open_backend(kept["backend"], dtype)
  start = time.perf_counter()
  loaded = {name: open_backend(name, dtype) for name in usable}
  seconds = measure(loaded, batch_size)
  chosen = decide(seconds)
  took = time.perf_counter() - start
  kept_seconds = {name: {str(size): value for size, value in times.items()}
                  for name, times in seconds.items()}  # as JSON keeps them
  written = choices.put(key, {"backend": chosen, "seconds": kept_seconds})
  _log(version, chosen, dtype, f"auto, {' and '.join(usable)} loaded and timed in {took:.0f} "
                               f"s: {_describe(seconds)}"
                               f"{f' (kept in {choices.path})' if written else ''}")
  return loaded[chosen]


def _reason(version, backend, dtype, max_loss):
  """unavailable(), with openvino's absence a reason rather than an error, and a damaged
  TensorFlow Lite model skipped with a warning, as TF Serving skips a version that fails to
  load."""
  try:
    reason = unavailable(version, backend, dtype, max_loss)
  except BertTfError as e:
    return str(e)
  if reason is None and backend != "savedmodel":
    damaged = export.tflite_damage(version)
    if damaged:
      logging.warning("%s: %s: %s skipped", version, damaged, backend)
      return f"backend='{backend}': the export's TensorFlow Lite model is damaged ({damaged})"
  return reason


def _kept(value, batch_size, usable):
  """Whether a cache entry is what pick keeps: the backend chosen and the seconds of each usable
  backend at batch 1 and batch_size (sizes as JSON keeps them: strings)."""
  sizes = {str(size) for size in (1, batch_size)}
  seconds = value["seconds"]
  return (value["backend"] in usable and set(seconds) == set(usable) and
          all(set(times) == sizes and all(isinstance(s, (int, float)) and s > 0
                                          for s in times.values())
              for times in seconds.values()))


def _log(path, backend, dtype, reason):
  onednn = "on" if activations.onednn_enabled() else "off"
  logging.info("predictor backend %s for %s in %s (%s; TensorFlow's oneDNN %s, %s)", backend,
               path, dtype, reason, onednn, machine.cpu()["model"])


def _describe(seconds):
  """"batch 1: tflite 21.0 ms, savedmodel 33.1 ms; batch 32: ..." of {backend: {size: s}} (sizes
  as numbers, or as the strings of JSON)."""
  seconds = {name: {int(size): s for size, s in times.items()} for name, times in seconds.items()}
  parts = []
  for size in sorted(next(iter(seconds.values()))):
    ranked = sorted(seconds, key=lambda name, size=size: seconds[name][size])
    parts.append(f"batch {size}: " + ", ".join(f"{name} {1000 * seconds[name][size]:.1f} ms"
                                                for name in ranked))
  return "; ".join(parts)


def measure_key(version, batch_size, dtype="float32", names=MEASURED):
  """What the timing of an export's backends depends on, as JSON values: the export's files
  the backends `names` read in dtype (where, size, modification time), the machine, TensorFlow
  and its oneDNN, the dtype and the batch size."""
  files = {}
  for name in sorted({f for backend in names for f in _files(backend, dtype)}):
    stat = tf.io.gfile.stat(os.path.join(version, name))
    files[name] = [stat.length, stat.mtime_nsec]
  where = version if fileio.is_url(version) else os.path.realpath(version)
  return {"export": where, "files": files, **machine.machine_key(),
          "tensorflow": tf.__version__, "onednn": activations.onednn_enabled(),
          "dtype": dtype, "batch_size": batch_size}


def probe_inputs(loaded, count):
  """`count` inputs for every input of the export's signature, each max_seq_length words of its
  vocabulary (a token each): the longest inputs the export takes whole, as the predictor's
  _run takes them ({input name: [str]}). loaded: {backend: Predictor}, one of them of a server
  built in memory (TensorFlow Lite's or OpenVINO's: its tokenizer and length)."""
  server = next(p.module for p in loaded.values() if p.backend != "savedmodel")
  length = server.max_seq_length
  words = [w for w in server.tokenizer.vocab if w.isascii() and w.isalpha()] or ["a"]
  names = sorted(spec.name for spec in server.serve.input_signature)
  return {name: [" ".join(words[(7 * i + 13 * j + k) % len(words)] for k in range(length))
                 for i in range(count)]
          for j, name in enumerate(names)}


def measure(loaded, batch_size, rounds=None):
  """{backend: {batch size: least seconds of a call}} of the predictors `loaded` ({backend:
  Predictor}) on probe_inputs, at batch 1 and at batch_size, the backends taking turns."""
  rounds = rounds or ROUNDS
  sizes = sorted({1, batch_size})
  inputs = {size: probe_inputs(loaded, size) for size in sizes}
  for predictor in loaded.values():  # the first call traces the server
    predictor._run(inputs[1])  # pylint: disable=protected-access
  seconds = {}
  for size in sizes:
    timed = machine.time_in_turns(
        {name: (lambda p=predictor, i=inputs[size]: p._run(i))  # pylint: disable=protected-access
         for name, predictor in loaded.items()},
        rounds["small" if size == 1 else "large"])
    for name, values in timed.items():
      seconds.setdefault(name, {})[size] = min(values)
  return seconds


def decide(seconds):
  """The backend whose worst slowdown against the fastest, over the batch sizes timed, is least
  ({backend: {batch size: seconds}}); on a tie the first."""
  sizes = next(iter(seconds.values())).keys()
  best = {size: min(times[size] for times in seconds.values()) for size in sizes}
  worst = {name: max(times[size] / best[size] for size in sizes)
           for name, times in seconds.items()}
  return min(worst, key=worst.get)
