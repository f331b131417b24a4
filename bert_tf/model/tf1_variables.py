"""Our Keras layers with their variables made by tf.compat.v1.get_variable, for the original's
graph-style API (bert_tf.modeling).

TF1 code finds variables through the variable store that get_variable fills: variable scopes and
their reuse, tf.compat.v1.train.init_from_checkpoint's assignment maps and
tf.compat.v1.keras.utils.track_tf1_style_variables all read it, and a Keras weight never enters it.
Inside `keras_layers_on_get_variable(prefix)`, every variable a Keras layer creates under the
absolute name scope `prefix/` comes from get_variable instead, named by the rest of its scope path
within the caller's current variable scope: `bert/encoder/layer_0/.../kernel` built under the
scope `bert/` is get_variable("encoder/layer_0/.../kernel") inside the caller's `bert` variable
scope, so the layer reads exactly the variables the original's code would have made.
"""
import contextlib
import os
import re
import threading

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import tensorflow as tf  # noqa: E402

_STATE = threading.local()


def _current_name_scope():
  """The current name scope, eager or graph, through public API: a probe scope's name less
  its own last part (in a graph the probe may be uniquified to probe_1, which is dropped too)."""
  with tf.name_scope("probe") as scope:
    return scope.rstrip("/").rpartition("/")[0]


@contextlib.contextmanager
def keras_layers_on_get_variable(prefix):
  """Within it, Keras layers built under the absolute name scope `prefix/` take their variables
  from tf.compat.v1.get_variable (see the module docstring)."""
  def creator(next_creator, **kwargs):
    if getattr(_STATE, "inside", False) or not kwargs.get("name"):  # unnamed: Keras' counters
      return next_creator(**kwargs)
    scope = _current_name_scope()
    if not (scope + "/").startswith(prefix + "/"):
      return next_creator(**kwargs)
    name = (scope + "/")[len(prefix) + 1:] + kwargs["name"]
    initial_value = kwargs["initial_value"]  # Keras passes its initializer bound to the shape
    _STATE.inside = True
    try:
      return tf.compat.v1.get_variable(
          name, shape=kwargs["shape"], dtype=kwargs["dtype"], trainable=kwargs["trainable"],
          initializer=lambda *unused_args, **unused_kwargs: initial_value())
    finally:
      _STATE.inside = False

  with tf.variable_creator_scope(creator):
    yield


def unused_name_scope(base):
  """A name scope no op of the current graph has used yet (`base`, `base_1`, ...; eagerly,
  `base`): Keras names its sub-layers' scopes relative to their parents', and a graph would
  uniquify a reused one (`embeddings_1`), which would change the variables' names."""
  if tf.executing_eagerly():
    return base
  return tf.compat.v1.get_default_graph().unique_name(base)


def build_in_scope(layer, input_shape=None):
  """Builds `layer` (and the sub-layers its build() builds): its variables are get_variable's,
  named as the layer names them below its own name, in the caller's variable scope."""
  prefix = unused_name_scope(layer.name)
  with keras_layers_on_get_variable(prefix), tf.name_scope(prefix + "/"):
    layer.build(input_shape)


def variable_name(name):
  """A variable's name without its output index: `bert/.../kernel:0` -> `bert/.../kernel`."""
  return re.sub(r":\d+$", "", name)
