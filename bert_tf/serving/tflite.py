"""TensorFlow Lite for CPU inference: a model on token ids as a .tflite file, and its runner.

On AVX2 CPUs without AVX-512, TensorFlow Lite's XNNPACK kernels run the encoder faster than
TensorFlow itself, at batch 1 most of all (BENCHMARKS.md, bench/bench_cpu_inference.py peers
tflite*). The file holds the model from int32 ids [B, T] to its outputs; B and T are
dynamic. Tokenization stays outside it, in bert_tf.text.fast_tokenization (TensorFlow Lite has none of
tensorflow-text's ops built in), which is why the exported SavedModel (raw text in, one graph)
remains the serving format and this file sits beside it (export_savedmodel.py --tflite).

  blob = tflite.convert(model, ["logits"])                 # float32
  blob = tflite.convert(model, ["logits"], quantize="dynamic")
  blob = tflite.convert(model, ["logits"], quantize="int8", calibration=[features, ...])
  runner = tflite.Runner(blob)                             # or Runner(path=...)
  runner(input_ids, input_mask, segment_ids)               # -> {"logits": np.ndarray [B, 2]}
  server = make_server(..., model=ServingModel(runner), ...)  # a task server on the file

ServingModel puts the file in the place of a task server's Keras model (bert_tf.tasks.text_server), so that
the server's own tokenization and post-processing run around it: bert_tf.serving.predictor's tflite
backend, for every task.

quantize="dynamic" is TensorFlow Lite's dynamic-range quantization: weights int8, one scale per
output channel, each matmul's input quantized on the fly from its own range. quantize="int8" is
post-training integer quantization, calibrated: the same int8 weights, and each matmul's input
quantized with one scale and zero point fixed from the ranges the calibration inputs reach. Only
the dense layers' matmuls (FULLY_CONNECTED, INT8_OPS) run in int8; every other op keeps float32
(TensorFlow Lite's selective quantization: its QuantizationDebugger's denylist), because int8 costs
either accuracy or speed there, as measured (BENCHMARKS.md, int8-ops): the embeddings' lookup, the
layer norms' mean and variance, the softmax, the attention's batched matmuls (TensorFlow Lite has
only reference int8 kernels for them on x86, many times slower than XNNPACK's float32) and GELU.
"""
import os
import warnings

import numpy as np
import tensorflow as tf

from bert_tf.errors import BertTfError
from bert_tf.io import integrity
from bert_tf.model import activations

FEATURES = ("input_ids", "input_mask", "segment_ids")
QUANTIZE = ("none", "dynamic", "int8")
# The ops quantize="int8" computes in int8 (the module docstring says why only these).
INT8_OPS = ("FULLY_CONNECTED",)


def _check_quantize(quantize, calibration):
  if quantize not in QUANTIZE:
    raise ValueError(f"quantize should be one of {QUANTIZE}, got {quantize!r}")
  if (quantize == "int8") != bool(calibration):
    raise ValueError("convert: calibration inputs go with quantize='int8', and only with it")


def convert(model, output_keys=None, quantize="none", calibration=None, int8_ops=INT8_OPS):
  """The .tflite bytes of `model` (a Keras model taking the FEATURES dict, returning a dict)
  called with training=False on int32 [B, T] ids, giving its `output_keys` (default: every
  output) as float32. A float32 model only: TensorFlow Lite's XNNPACK path is float32.

  quantize: none, dynamic or int8 (the module docstring). calibration: with int8, a list of
  {feature: int32 numpy [1, T]} (one input each, unpadded, as the server gives the model);
  int8_ops: the TensorFlow Lite op types computed in int8, every other one in float32."""
  _check_quantize(quantize, calibration)
  if model.compute_dtype != "float32":
    raise BertTfError(f"--tflite: exports a float32 model only, not a {model.compute_dtype} one "
                      f"(--dtype; the predictor's dtype= likewise)")
  spec = [tf.TensorSpec([None, None], tf.int32, name) for name in FEATURES]

  @tf.function(input_signature=spec)
  def serve(input_ids, input_mask, segment_ids):
    outputs = model(dict(zip(FEATURES, (input_ids, input_mask, segment_ids))), training=False)
    return {key: tf.cast(outputs[key], tf.float32) for key in output_keys or outputs}

  # A task model's trim_padding cuts each batch to its longest input, a shape that depends on the
  # mask's values, which XNNPACK cannot plan for: the caller trims instead (as Runner's users do).
  trim = getattr(model, "trim_padding", False)
  if trim:
    model.trim_padding = False
  try:
    with activations.unfused_inference_gelu():  # no XLA-compiled GELU inside the file
      function = serve.get_concrete_function()
    converter = tf.lite.TFLiteConverter.from_concrete_functions([function], model)
    if quantize == "none":
      return converter.convert()
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if quantize == "dynamic":
      return converter.convert()
    return calibrated(converter, lambda: ({name: np.asarray(f[name], np.int32) for name in FEATURES}
                                          for f in calibration), int8_ops)
  finally:
    if trim:
      model.trim_padding = trim


def calibrated(converter, inputs, int8_ops=INT8_OPS):
  """The converter's model quantized with TensorFlow Lite's calibration on inputs() (a callable
  giving an iterator of {input name: numpy array}), int8 only in the op types of int8_ops."""
  from tensorflow.lite.python import schema_py_generated  # pylint: disable=g-import-not-at-top
  # Every builtin op type but int8_ops stays float32 (the debugger's denylist takes op names).
  denylist = [name for name in dir(schema_py_generated.BuiltinOperator)
              if name.isupper() and name not in int8_ops]
  converter.optimizations = [tf.lite.Optimize.DEFAULT]
  converter.representative_dataset = inputs
  with warnings.catch_warnings():  # the debugger's "experimental" notices
    warnings.simplefilter("ignore")
    debugger = tf.lite.experimental.QuantizationDebugger(
        converter=converter, debug_dataset=inputs,
        debug_options=tf.lite.experimental.QuantizationDebugOptions(denylisted_ops=denylist))
    return debugger.get_nondebug_quantized_model()


# Rows of at most this many tokens a pass: a bigger batch runs as several passes, so that the
# activations of each (BERT-Base's [1024, 3072] float32 intermediate: 12.6 MB) stay in the cache
# instead of streaming through memory: faster than one pass where a batch holds more, level where
# it is one pass anyway (BENCHMARKS.md, tflite-passes; bench/bench_cpu_inference.py's peer
# tflite_unsplit is the one pass). 512 tokens do as well, 256 worse.
TOKENS_PER_PASS = 1024


class Runner:
  """Runs a .tflite model from convert() on numpy ids. One interpreter serves every shape [B, T]:
  a call whose shape differs from the last one's re-plans XNNPACK's kernels (~2-3 ms for MiniLM,
  measured), which costs less than an interpreter per shape (each packs its own weights).

  A call of more than tokens_per_pass tokens (B * T) runs as passes of
  max(1, tokens_per_pass // T) rows each, their outputs concatenated (every output of convert()
  is batch-major); tokens_per_pass=None runs every call in one pass."""

  def __init__(self, blob=None, path=None, num_threads=None, tokens_per_pass=TOKENS_PER_PASS):
    if (blob is None) == (path is None):
      raise ValueError("Runner: give the model's bytes or its path, one of the two")
    if tokens_per_pass is not None and tokens_per_pass < 1:
      raise ValueError(f"Runner: tokens_per_pass should be positive or None, got "
                       f"{tokens_per_pass}")
    self.tokens_per_pass = tokens_per_pass
    # Checked in Python first: the interpreter trusts the file, and a cut one can crash it.
    damage = integrity.tflite_damage(blob) if path is None else integrity.tflite_file_damage(path)
    if damage:
      raise BertTfError(f"{path or 'the TensorFlow Lite model'}: {damage}: export it again")
    # TensorFlow Lite's own default is one thread: every core this process may use, unless told.
    num_threads = num_threads or len(os.sched_getaffinity(0))
    with warnings.catch_warnings():  # "tf.lite.Interpreter is deprecated": TF 2.20 still has it
      warnings.simplefilter("ignore")
      self.interpreter = tf.lite.Interpreter(model_content=blob, model_path=path,
                                             num_threads=num_threads)
    # The signature runner resizes the inputs to each call's shape and plans for it.
    self._run = self.interpreter.get_signature_runner()

  def output_details(self):
    """{output key: TensorFlow Lite's details of it}; "shape_signature" has -1 where dynamic."""
    return self._run.get_output_details()

  def __call__(self, input_ids, input_mask, segment_ids):
    """{output key: float32 numpy array} for int [B, T] numpy ids."""
    arrays = [np.ascontiguousarray(a, dtype=np.int32)
              for a in (input_ids, input_mask, segment_ids)]
    return in_passes(self._run, arrays, self.tokens_per_pass)


def in_passes(run, arrays, tokens_per_pass):
  """run(**{feature: rows}) over the int32 arrays (FEATURES' [B, T]), in passes of
  max(1, tokens_per_pass // T) rows (tokens_per_pass None: one pass), the outputs concatenated
  ({output key: array}: batch-major)."""
  batch_size, seq_length = arrays[0].shape
  rows = (batch_size if tokens_per_pass is None
          else max(1, tokens_per_pass // max(1, seq_length)))
  if batch_size <= rows:
    return run(**dict(zip(FEATURES, arrays)))
  passes = [run(**{name: array[start:start + rows] for name, array in zip(FEATURES, arrays)})
            for start in range(0, batch_size, rows)]
  return {key: np.concatenate([outputs[key] for outputs in passes]) for key in passes[0]}


class ServingModel:
  """A Runner standing in for a task server's Keras model: called inside the server's tf.function
  on its inputs dict (FEATURES; other keys ignored), it returns {output key: float32 tensor} as the
  Keras model does, computed by TensorFlow Lite (tf.numpy_function). For serving in this process
  only: a server holding it cannot be saved as a SavedModel."""

  def __init__(self, runner):
    self.runner = runner
    details = runner.output_details()
    self._keys = sorted(details)
    self._shapes = [[d if d >= 0 else None for d in details[key]["shape_signature"]]
                    for key in self._keys]

  def _run(self, *arrays):
    outputs = self.runner(*arrays)
    return [outputs[key] for key in self._keys]

  def __call__(self, inputs, training=False):
    del training  # inference only
    arrays = [tf.cast(inputs[name], tf.int32) for name in FEATURES]
    values = tf.numpy_function(self._run, arrays, [tf.float32] * len(self._keys), stateful=False)
    # The file's dynamic dimensions are the inputs' [B, T]: static where the inputs' are (SQuAD's
    # span search wants T static, as the Keras model gives it).
    batch_and_length = arrays[0].shape.as_list()
    return {key: tf.ensure_shape(value, [batch_and_length[i] if size is None and i < 2 else size
                                         for i, size in enumerate(shape)])
            for key, value, shape in zip(self._keys, values, self._shapes)}
