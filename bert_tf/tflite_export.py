"""TensorFlow Lite for CPU inference: a model on token ids as a .tflite file, and its runner.

On CPUs like this project's (AVX2, no AVX-512) TensorFlow Lite's XNNPACK kernels run the encoder
faster than TensorFlow itself, at batch 1 most of all (BENCHMARKS.md, bench/bench_cpu_inference.py
peers tflite*). The file holds the model from int32 ids [B, T] to its outputs; B and T are
dynamic. Tokenization stays outside it, in bert_tf.fast_tokenization (TensorFlow Lite has none of
tensorflow-text's ops built in), which is why the exported SavedModel (raw text in, one graph)
remains the serving format and this file sits beside it (export_savedmodel.py --tflite).

  blob = tflite_export.convert(model, ["logits"])          # float32
  blob = tflite_export.convert(model, ["logits"], quantize="dynamic_int8")
  runner = tflite_export.Runner(blob)                      # or Runner(path=...)
  runner(input_ids, input_mask, segment_ids)               # -> {"logits": np.ndarray [B, 2]}

quantize="dynamic_int8" is TensorFlow Lite's dynamic-range quantization: weights int8, one scale
per output channel, activations quantized on the fly; measured against float32 in BENCHMARKS.md.
"""
import warnings

import numpy as np
import tensorflow as tf

FEATURES = ("input_ids", "input_mask", "segment_ids")
QUANTIZE = ("none", "dynamic_int8")


def _check_quantize(quantize):
  if quantize not in QUANTIZE:
    raise ValueError(f"quantize should be one of {QUANTIZE}, got {quantize!r}")


def convert(model, output_keys, quantize="none"):
  """The .tflite bytes of `model` (a Keras model taking the FEATURES dict, returning a dict)
  called with training=False on int32 [B, T] ids, giving the float32 `output_keys`."""
  _check_quantize(quantize)
  spec = [tf.TensorSpec([None, None], tf.int32, name) for name in FEATURES]

  @tf.function(input_signature=spec)
  def serve(input_ids, input_mask, segment_ids):
    outputs = model(dict(zip(FEATURES, (input_ids, input_mask, segment_ids))), training=False)
    return {key: tf.cast(outputs[key], tf.float32) for key in output_keys}

  converter = tf.lite.TFLiteConverter.from_concrete_functions(
      [serve.get_concrete_function()], model)
  if quantize == "dynamic_int8":
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
  return converter.convert()


class Runner:
  """Runs a .tflite model from convert() on numpy ids; one interpreter per input shape [B, T]
  (resizing re-plans XNNPACK's kernels, so a server that sees few shapes keeps each ready)."""

  def __init__(self, blob=None, path=None, num_threads=None, max_shapes=8):
    if (blob is None) == (path is None):
      raise ValueError("Runner: give the model's bytes or its path, one of the two")
    if path is not None:
      with tf.io.gfile.GFile(path, "rb") as f:
        blob = f.read()
    self.blob, self.num_threads, self.max_shapes = blob, num_threads, max_shapes
    self._runners = {}

  def _runner(self, shape):
    """The signature runner of the interpreter for input shape [B, T] (made on first use)."""
    if shape not in self._runners:
      if len(self._runners) >= self.max_shapes:  # the oldest shape makes room
        self._runners.pop(next(iter(self._runners)))
      with warnings.catch_warnings():  # "tf.lite.Interpreter is deprecated": TF 2.20 has it
        warnings.simplefilter("ignore")
        interpreter = tf.lite.Interpreter(model_content=self.blob, num_threads=self.num_threads)
      # The signature runner resizes the inputs to the first call's shape and plans for it.
      self._runners[shape] = (interpreter, interpreter.get_signature_runner())
    return self._runners[shape][1]

  def __call__(self, input_ids, input_mask, segment_ids):
    """{output key: float32 numpy array} for int [B, T] numpy ids."""
    arrays = [np.ascontiguousarray(a, dtype=np.int32)
              for a in (input_ids, input_mask, segment_ids)]
    return self._runner(arrays[0].shape)(**dict(zip(FEATURES, arrays)))
