"""The activations of the encoder's configs, and the forms of GELU that run fastest where.

`hidden_act` names map to functions as in the original's get_activation ("gelu" is its tanh
form). Training steps run GELU as one fused value-and-derivative pass; inference graphs keep
tf.nn.gelu, which oneDNN fuses into the matmul before it, unless INFERENCE_GELU_FUSION says
otherwise.
"""
import contextlib
import math
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import tensorflow as tf  # noqa: E402


def gelu(x):
  """The original release's GELU (its modeling.gelu), the tanh approximation
  0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))): transformers' "gelu_new".

  tf.nn.gelu(approximate=True) computes that same expression; with oneDNN on, grappler's
  remapper fuses it with the MatMul + BiasAdd before it into one matmul (GeluApproximate), as
  it fuses the exact form (GeluExact).
  """
  return tf.nn.gelu(x, approximate=True)


def gelu_exact(x):
  """The exact GELU x Phi(x) = 0.5 x (1 + erf(x / sqrt(2))): transformers' "gelu"."""
  return tf.nn.gelu(x, approximate=False)


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_GELU_CUBIC = 0.044715


def _gelu_tanh_value_and_derivative(x):
  """gelu(x) and its derivative, float32; the derivative of 0.5 x (1 + t) with
  t = tanh(sqrt(2/pi) (x + c x^3)) is 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 c x^2)."""
  x2 = x * x
  t = tf.tanh(_SQRT_2_OVER_PI * x * (1.0 + _GELU_CUBIC * x2))
  derivative = 0.5 * (1.0 + t) + (0.5 * _SQRT_2_OVER_PI) * x * (1.0 - t * t) * (
      1.0 + 3.0 * _GELU_CUBIC * x2)
  return 0.5 * x * (1.0 + t), derivative


def _gelu_exact_value_and_derivative(x):
  """gelu_exact(x) and its derivative Phi(x) + x phi(x), float32."""
  cdf = 0.5 * (1.0 + tf.math.erf(x * (1.0 / math.sqrt(2.0))))
  return x * cdf, cdf + x * tf.exp(-0.5 * x * x) * (1.0 / math.sqrt(2.0 * math.pi))


def _fused_for_training(value_and_derivative):
  """An elementwise function for training steps whose forward and backward are each one
  XLA-compiled pass in float32 (one read and one write of the tensor), cast back to the input's
  dtype.

  Unfused, the GELU's eight or so elementwise ops forward and a dozen backward each make a pass
  over the [tokens, intermediate_size] activations, in bfloat16 at that; fused, it is one
  (BENCHMARKS.md#gelu). XLA compiles once per input shape.
  """
  def forward(x):
    return tf.cast(value_and_derivative(tf.cast(x, tf.float32))[0], x.dtype)

  def backward(x, dy):
    derivative = value_and_derivative(tf.cast(x, tf.float32))[1]
    return tf.cast(tf.cast(dy, tf.float32) * derivative, x.dtype)

  forward = tf.function(forward, jit_compile=True, reduce_retracing=True, autograph=False)
  backward = tf.function(backward, jit_compile=True, reduce_retracing=True, autograph=False)

  @tf.custom_gradient
  def fused(x):
    def gradient(dy):
      return backward(x, dy)
    return forward(x), gradient

  return fused


gelu_for_training = _fused_for_training(_gelu_tanh_value_and_derivative)
gelu_exact_for_training = _fused_for_training(_gelu_exact_value_and_derivative)


def _fused_for_inference(value_and_derivative):
  """The forward of _fused_for_training alone: one XLA-compiled float32 pass, no gradient."""
  def forward(x):
    return tf.cast(value_and_derivative(tf.cast(x, tf.float32))[0], x.dtype)
  return tf.function(forward, jit_compile=True, reduce_retracing=True, autograph=False)


gelu_for_inference = _fused_for_inference(_gelu_tanh_value_and_derivative)
gelu_exact_for_inference = _fused_for_inference(_gelu_exact_value_and_derivative)


def onednn_enabled():
  """Whether TensorFlow runs oneDNN's graph rewrites in this process (TF_ENABLE_ONEDNN_OPTS as
  read at import, or TensorFlow's default for this CPU: on with AVX-512-class features)."""
  try:
    from tensorflow.python.util import _pywrap_util_port  # pylint: disable=g-import-not-at-top
    return bool(_pywrap_util_port.IsMklEnabled())
  except (ImportError, AttributeError):
    return os.environ.get("TF_ENABLE_ONEDNN_OPTS", "0").lower() in ("1", "true")


# Inference GELU: "never" (the default) keeps tf.nn.gelu, which oneDNN, where it is on, fuses
# into the matmul before it; "always" computes it in one XLA-compiled pass (where oneDNN is off,
# tf.nn.gelu is some eight separate elementwise ops); "auto": "always" where oneDNN is off. Not the
# default: it is not clearly faster than tf.nn.gelu on every CPU (BENCHMARKS.md#gelu), and it
# compiles once per input shape. export.save traces
# with "never" (a SavedModel stays free of XLA functions, which a model server may not run).
INFERENCE_GELU_FUSION = "never"
_INFERENCE_ACTIVATIONS = {gelu: gelu_for_inference, gelu_exact: gelu_exact_for_inference}


@contextlib.contextmanager
def unfused_inference_gelu():
  """Within it, inference graphs traced keep tf.nn.gelu (for SavedModels)."""
  global INFERENCE_GELU_FUSION
  previous, INFERENCE_GELU_FUSION = INFERENCE_GELU_FUSION, "never"
  try:
    yield
  finally:
    INFERENCE_GELU_FUSION = previous


def inference_activation(activation):
  """The form of `activation` inference graphs use now (see INFERENCE_GELU_FUSION)."""
  if INFERENCE_GELU_FUSION == "always" or (INFERENCE_GELU_FUSION == "auto"
                                           and not onednn_enabled()):
    return _INFERENCE_ACTIVATIONS.get(activation, activation)
  return activation

_ACTIVATIONS = {
    "gelu": gelu,
    "gelu_new": gelu,
    "gelu_exact": gelu_exact,
    "relu": tf.nn.relu,
    "tanh": tf.tanh,
    "swish": tf.nn.silu,
    "silu": tf.nn.silu,
    "linear": None,
    "": None,
}
# The same functions in the forms training steps run fastest (see _fused_for_training);
# inference keeps the forms that oneDNN fuses into the matmul before them.
_TRAINING_ACTIVATIONS = {gelu: gelu_for_training, gelu_exact: gelu_exact_for_training}


def training_activation(activation):
  """The form of `activation` training steps run (see _fused_for_training)."""
  return _TRAINING_ACTIVATIONS.get(activation, activation)


def get_activation(name):
  """Activation function for a config's `hidden_act` string (None, "" or "linear" -> None), as
  the original's get_activation: case does not matter."""
  if name is None or callable(name):
    return name
  key = name.lower()
  if key not in _ACTIVATIONS:
    raise ValueError(f"Unsupported activation: {name}")
  return _ACTIVATIONS[key]
