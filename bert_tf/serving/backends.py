"""Which backend runs the predictor's model on this machine: measured on it, not assumed.

An export made with --tflite can be served two ways, its SavedModel (TensorFlow, with oneDNN where
bert_tf.training.machine.prefer_onednn turned it on) or its model.tflite (TensorFlow Lite's XNNPACK),
and which is faster depends on the CPU: TensorFlow Lite was 1.2-1.6x faster on an AVX2-only AMD
EPYC, 1.29-1.34x slower on an AVX-512 Intel Xeon (BENCHMARKS.md). So backend="auto" times both on
the export's own shapes (inputs of max_seq_length words, at batch 1 and at the predictor's
batch_size, the two taking turns) and takes the one whose worst slowdown against the other is
least. The choice is kept per export file, CPU, threads, TensorFlow version, oneDNN setting and
batch_size in the user's cache (machine.Choices("backends"), never in the export, which may be
read-only), so only the first load on a machine pays for the timing. Every load says its backend
and why in one log line; a backend asked for by name is used as asked.
"""
import os
import time

from absl import logging
import tensorflow as tf

from bert_tf.io import fileio
from bert_tf.training import machine
from bert_tf.model import activations
from bert_tf.serving import export

BACKENDS = ("auto", "savedmodel", "tflite")
MEASURED = ("savedmodel", "tflite")
# Timed calls of each backend per batch size (after one untimed call each); the least is kept,
# which the load from other processes raises least.
ROUNDS = {"small": 3, "large": 2}


def for_output_dir(path, backend):
  """The backend of a fine-tuning output_dir's in-memory server; auto: savedmodel (converting the
  model to TensorFlow Lite would cost every load more than it saves a typical one), logged."""
  if backend == "auto":
    _log(path, "savedmodel", "auto, an output_dir: TensorFlow Lite would convert the model on "
                             "every load; ask for backend='tflite', or load an export made "
                             "with --tflite")
    return "savedmodel"
  _log(path, backend, "asked for")
  return backend


def pick(version, backend, batch_size, open_backend, choices=None):
  """The predictor of an export's version directory that `backend` names, open_backend(name)
  making it; auto: the backend measured fastest here (see the module docstring), both opened
  and timed when no choice is kept for this export and machine. choices: a machine.Choices
  (default: the user's cache)."""
  if backend != "auto":
    _log(version, backend, "asked for")
    return open_backend(backend)
  if not export.has_tflite(version):
    _log(version, "savedmodel", f"auto, the export holds no {export.TFLITE_FILE} (export with "
                                f"--tflite to let auto time TensorFlow Lite)")
    return open_backend("savedmodel")
  damaged = export.tflite_damage(version)
  if damaged:  # skipped, as TF Serving skips a version that fails to load
    logging.warning("%s: %s: TensorFlow Lite skipped, the SavedModel served", version, damaged)
    _log(version, "savedmodel", "auto, the export's TensorFlow Lite model is damaged")
    return open_backend("savedmodel")
  choices = choices or machine.Choices("backends")
  key = measure_key(version, batch_size)
  kept = choices.get(key, check=lambda value: _kept(value, batch_size))
  if kept:
    _log(version, kept["backend"], f"auto, timed before on this machine: "
                                   f"{_describe(kept['seconds'])} (kept in {choices.path})")
    return open_backend(kept["backend"])
  start = time.perf_counter()
  loaded = {name: open_backend(name) for name in MEASURED}
  seconds = measure(loaded, batch_size)
  chosen = decide(seconds)
  took = time.perf_counter() - start
  kept_seconds = {name: {str(size): value for size, value in times.items()}
                  for name, times in seconds.items()}  # as JSON keeps them
  written = choices.put(key, {"backend": chosen, "seconds": kept_seconds})
  _log(version, chosen, f"auto, both loaded and timed in {took:.0f} s: {_describe(seconds)}"
                        f"{f' (kept in {choices.path})' if written else ''}")
  return loaded[chosen]


def _kept(value, batch_size):
  """Whether a cache entry is what pick keeps: the backend chosen and both backends' seconds at
  batch 1 and batch_size (sizes as JSON keeps them: strings)."""
  sizes = {str(size) for size in (1, batch_size)}
  seconds = value["seconds"]
  return (value["backend"] in MEASURED and set(seconds) == set(MEASURED) and
          all(set(times) == sizes and all(isinstance(s, (int, float)) and s > 0
                                          for s in times.values())
              for times in seconds.values()))


def _log(path, backend, reason):
  onednn = "on" if activations.onednn_enabled() else "off"
  logging.info("predictor backend %s for %s (%s; TensorFlow's oneDNN %s, %s)", backend, path,
               reason, onednn, machine.cpu()["model"])


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


def measure_key(version, batch_size):
  """What the timing of an export's backends depends on, as JSON values: the export's files
  (where, size, modification time), the machine, TensorFlow and its oneDNN, the batch size."""
  files = {}
  for name in ("saved_model.pb", export.TFLITE_FILE):
    stat = tf.io.gfile.stat(os.path.join(version, name))
    files[name] = [stat.length, stat.mtime_nsec]
  where = version if fileio.is_url(version) else os.path.realpath(version)
  return {"export": where, "files": files, **machine.machine_key(),
          "tensorflow": tf.__version__, "onednn": activations.onednn_enabled(),
          "batch_size": batch_size}


def probe_inputs(loaded, count):
  """`count` inputs for every input of the export's signature, each max_seq_length words of its
  vocabulary (a token each): the longest inputs the export takes whole, as the predictor's
  _run takes them ({input name: [str]})."""
  server = loaded["tflite"].module  # the server built in memory: its tokenizer and length
  length = server.max_seq_length
  words = [w for w in server.tokenizer.vocab if w.isascii() and w.isalpha()] or ["a"]
  names = sorted(loaded["savedmodel"].serve.structured_input_signature[1])
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
