"""The original release's `optimization` module (google-research/bert's optimization.py), for
code written against it: create_optimizer(loss, ...) returning a train op, and
AdamWeightDecayOptimizer, a tf.compat.v1.train.Optimizer.

create_optimizer builds a TF1 graph (tf.compat.v1.trainable_variables, tf.gradients): it is
graph-only (tf.compat.v1.disable_v2_behavior() or a tf.Graph with a Session).
AdamWeightDecayOptimizer.apply_gradients runs in a graph, eagerly and inside tf.function. bert_tf's
own Keras optimizers are bert_tf.training.optimization, whose learning rate schedule and
weight-decay exclusions create_optimizer uses.
"""
import re

import tensorflow as tf

from bert_tf.model import tf1_variables
from bert_tf.training.optimization import EXCLUDE_FROM_WEIGHT_DECAY
from bert_tf.training.optimization import WarmupLinearDecay

tf1 = tf.compat.v1


def create_optimizer(loss, init_lr, num_train_steps, num_warmup_steps, use_tpu):
  """The original's training op for `loss`: the gradients of every trainable variable clipped to
  global norm 1.0, then an AdamWeightDecayOptimizer step (weight decay 0.01 but for LayerNorm and
  biases) at a learning rate warming up linearly over num_warmup_steps, then decaying linearly
  to 0 at num_train_steps; the global step (created if need be) counts the steps. use_tpu wraps
  the optimizer in tf.compat.v1.tpu.CrossShardOptimizer."""
  if tf.executing_eagerly():
    raise RuntimeError("bert_tf.optimization.create_optimizer builds a graph (tf.gradients): "
                       "call it in a tf.Graph or after tf.compat.v1.disable_v2_behavior(), or "
                       "use bert_tf.training.optimization.create_optimizer eagerly")
  global_step = tf1.train.get_or_create_global_step()
  learning_rate = WarmupLinearDecay(init_lr, num_train_steps, num_warmup_steps)(global_step)
  optimizer = AdamWeightDecayOptimizer(
      learning_rate=learning_rate, weight_decay_rate=0.01, beta_1=0.9, beta_2=0.999,
      epsilon=1e-6, exclude_from_weight_decay=list(EXCLUDE_FROM_WEIGHT_DECAY))
  if use_tpu:
    optimizer = tf1.tpu.CrossShardOptimizer(optimizer)
  tvars = tf1.trainable_variables()
  # tf.gradients gives an embedding lookup's gradient as IndexedSlices, whose rows the global
  # norm counts one by one: the original's clip on CPU and GPU.
  grads, _ = tf1.clip_by_global_norm(tf1.gradients(loss, tvars), clip_norm=1.0)
  train_op = optimizer.apply_gradients(zip(grads, tvars), global_step=global_step)
  # AdamWeightDecayOptimizer leaves the global step alone, as the original's: it moves here.
  return tf.group(train_op, [global_step.assign(global_step + 1)])


class AdamWeightDecayOptimizer(tf1.train.Optimizer):
  """Adam without bias correction, plus weight decay added to the update (not to the loss):
  for each variable p with gradient g,
    m = beta_1 m + (1 - beta_1) g,  v = beta_2 v + (1 - beta_2) g^2,
    p = p - learning_rate (m / (sqrt(v) + epsilon) + weight_decay_rate p),
  the decay left out for variables whose name matches a regex of exclude_from_weight_decay.
  m and v are the variables `<p's name>/adam_m` and `/adam_v` (not trainable)."""

  def __init__(self, learning_rate, weight_decay_rate=0.0, beta_1=0.9, beta_2=0.999,
               epsilon=1e-6, exclude_from_weight_decay=None, name="AdamWeightDecayOptimizer"):
    super().__init__(False, name)
    self.learning_rate = learning_rate
    self.weight_decay_rate = weight_decay_rate
    self.beta_1 = beta_1
    self.beta_2 = beta_2
    self.epsilon = epsilon
    self.exclude_from_weight_decay = exclude_from_weight_decay
    self._moments = {}  # variable reference -> (m, v)

  def _moments_of(self, param, param_name):
    """(m, v) of param, made on first use: outside any tf.function being traced, so that a
    traced step keeps them."""
    key = param.ref()
    if key not in self._moments:
      with tf.init_scope():
        self._moments[key] = tuple(
            tf1.get_variable(f"{param_name}/{slot}", shape=param.shape.as_list(),
                             dtype=tf.float32, trainable=False,
                             initializer=tf1.zeros_initializer())
            for slot in ("adam_m", "adam_v"))
    return self._moments[key]

  def apply_gradients(self, grads_and_vars, global_step=None, name=None):
    """One step of every (gradient, variable) pair (a None of either is skipped). global_step
    is not incremented (create_optimizer does it). Returns the op grouping the assignments."""
    assignments = []
    for grad, param in grads_and_vars:
      if grad is None or param is None:
        continue
      param_name = self._get_variable_name(param.name)
      m, v = self._moments_of(param, param_name)
      grad = tf.convert_to_tensor(grad)  # an IndexedSlices made dense
      next_m = self.beta_1 * m + (1.0 - self.beta_1) * grad
      next_v = self.beta_2 * v + (1.0 - self.beta_2) * tf.square(grad)
      update = next_m / (tf.sqrt(next_v) + self.epsilon)
      if self._do_use_weight_decay(param_name):
        update += self.weight_decay_rate * param
      next_param = param - self.learning_rate * update
      assignments.extend([param.assign(next_param), m.assign(next_m), v.assign(next_v)])
    return tf.group(*assignments, name=name)

  def _do_use_weight_decay(self, param_name):
    if not self.weight_decay_rate:
      return False
    return not any(re.search(pattern, param_name)
                   for pattern in self.exclude_from_weight_decay or ())

  def _get_variable_name(self, param_name):
    return tf1_variables.variable_name(param_name)
