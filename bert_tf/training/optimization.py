"""The original BERT optimizer (AdamWeightDecay with warmup then linear decay) and LAMB.

The original (bert/optimization.py) updated every parameter p with gradient g as:
  m = b1 * m + (1 - b1) * g;  v = b2 * v + (1 - b2) * g^2          (no bias correction)
  update = m / (sqrt(v) + eps) + weight_decay_rate * p               (decay skipped for
                                                                      LayerNorm/layer_norm/bias)
  p = p - lr(step) * update
with gradients clipped to global norm 1.0 first, and lr(step) = init_lr * step / warmup during
warmup, else init_lr * (1 - step / num_train_steps) (step = updates done so far, from 0).

The global norm the original clipped by is that of the gradients as TF1 produced them: on CPU and
GPU its word-embedding lookup is a gather, whose gradient is an IndexedSlices with one row per
looked-up position, and tf.clip_by_global_norm sums those rows' squared norms (a token seen k
times adds |g1|^2 + ... + |gk|^2, not |g1 + ... + gk|^2). With --use_tpu (one-hot lookups) and
wherever the table's gradient has a dense part too (run_pretraining.py's masked LM reads the
table as its output weights) the gradient is dense, and so is its norm. CLIP_NORM_RULES names
the two; bert_tf.training.loop applies the rule (create_optimizer(clip_norm=None) then clips nothing).
"""
import re

import tensorflow as tf
import tf_keras

from bert_tf.errors import BertTfError
from bert_tf.training.options import OPTIMIZERS as OPTIMIZER_TYPES

EXCLUDE_FROM_WEIGHT_DECAY = ("LayerNorm", "layer_norm", "bias")
# per_position: the original's on CPU/GPU (see the module docstring); dense: with --use_tpu.
CLIP_NORM_RULES = ("per_position", "dense")
# The variables whose IndexedSlices gradients count per position under the per_position rule: the
# word embeddings only (the original looked token types up one-hot, always: dense).
PER_POSITION_VARIABLES = ("word_embeddings",)


def squared_norm(gradient):
  """The squared L2 norm (float32 scalar) tf.global_norm counts for one gradient: of an
  IndexedSlices, the sum of its rows' (repeated indices not summed first)."""
  values = gradient.values if isinstance(gradient, tf.IndexedSlices) else gradient
  return tf.reduce_sum(tf.square(tf.cast(values, tf.float32)))


def clip_norm_rule_of_flag(flag_value):
  """--clip_norm_rule's value as resolve_clip_norm_rule's rule: None (the original's on the
  device) for "original"."""
  return None if flag_value == "original" else flag_value


def resolve_clip_norm_rule(rule, on_tpu):
  """The rule to clip by: `rule`, or where None, the original's on this kind of device."""
  if rule is None:
    return "dense" if on_tpu else "per_position"
  if rule not in CLIP_NORM_RULES:
    raise BertTfError(f"--clip_norm_rule: {rule!r} is not one of {CLIP_NORM_RULES}")
  return rule


def clip_by_global_norm(gradients, clip_norm, global_squared_norm):
  """gradients (dense) times clip_norm / max(global norm, clip_norm), as tf.clip_by_global_norm,
  with the global norm sqrt(global_squared_norm) counted by the caller (see squared_norm)."""
  norm = tf.sqrt(global_squared_norm)
  scale = clip_norm * tf.minimum(1.0 / norm, 1.0 / clip_norm)
  return [g * tf.cast(scale, g.dtype) for g in gradients]


class WarmupLinearDecay(tf_keras.optimizers.schedules.LearningRateSchedule):
  """Linear warmup to init_lr over num_warmup_steps, then linear decay to 0 at num_train_steps."""

  def __init__(self, init_lr, num_train_steps, num_warmup_steps):
    super().__init__()
    self.init_lr = float(init_lr)
    self.num_train_steps = int(num_train_steps)
    self.num_warmup_steps = int(num_warmup_steps)

  def __call__(self, step):
    step = tf.cast(step, tf.float32)
    # tf.train.polynomial_decay with power 1 and cycle=False clamps the step at num_train_steps.
    done = tf.minimum(step, float(self.num_train_steps)) / float(max(self.num_train_steps, 1))
    decayed = self.init_lr * (1.0 - done)
    if not self.num_warmup_steps:
      return decayed
    warmup = self.init_lr * step / float(self.num_warmup_steps)
    return tf.where(step < float(self.num_warmup_steps), warmup, decayed)

  def get_config(self):
    return {"init_lr": self.init_lr, "num_train_steps": self.num_train_steps,
            "num_warmup_steps": self.num_warmup_steps}


class _DecoupledDecayOptimizer(tf_keras.optimizers.Optimizer):
  """Shared part of AdamWeightDecay and LAMB: m/v slots and the weight-decay exclusion list."""

  def __init__(self, learning_rate, weight_decay_rate=0.01, beta_1=0.9, beta_2=0.999,
               epsilon=1e-6, exclude_from_weight_decay=EXCLUDE_FROM_WEIGHT_DECAY,
               global_clipnorm=1.0, name="optimizer", **kwargs):
    # jit_compile=False: XLA does not help on CPU, and the update must equal the formula exactly.
    # weight_decay=None: tf_keras's own decay (default 0) would still subtract 0 * lr * w from
    # every weight, a wasted pass over all of them each step; the decay here is decoupled.
    for key in ("weight_decay", "jit_compile"):  # set here; get_config() has them too
      kwargs.pop(key, None)
    super().__init__(name=name, global_clipnorm=global_clipnorm, jit_compile=False,
                     weight_decay=None, **kwargs)
    self._learning_rate = self._build_learning_rate(learning_rate)
    self.weight_decay_rate = weight_decay_rate
    self.beta_1 = beta_1
    self.beta_2 = beta_2
    self.epsilon = epsilon
    self.exclude_from_weight_decay_patterns = list(exclude_from_weight_decay or [])

  def build(self, var_list):
    super().build(var_list)
    if hasattr(self, "_built") and self._built:
      return
    self._built = True
    # Slot names follow the original's "<variable>/adam_m" and "<variable>/adam_v".
    self._m = [self.add_variable_from_reference(var, "adam_m") for var in var_list]
    self._v = [self.add_variable_from_reference(var, "adam_v") for var in var_list]

  def is_excluded(self, name):
    return any(re.search(p, name) for p in self.exclude_from_weight_decay_patterns)

  def do_use_weight_decay(self, name):
    """Whether the variable called `name` gets weight decay (the original's _do_use_weight_decay)."""
    return bool(self.weight_decay_rate) and not self.is_excluded(name)

  def _moments(self, gradient, variable):
    gradient = tf.convert_to_tensor(gradient)
    index = self._index_dict[self._var_key(variable)]
    m, v = self._m[index], self._v[index]
    m.assign(self.beta_1 * m + (1.0 - self.beta_1) * gradient)
    v.assign(self.beta_2 * v + (1.0 - self.beta_2) * tf.square(gradient))
    return m, v

  def get_config(self):
    config = super().get_config()
    config.update({
        "learning_rate": self._serialize_hyperparameter(self._learning_rate),
        "weight_decay_rate": self.weight_decay_rate, "beta_1": self.beta_1,
        "beta_2": self.beta_2, "epsilon": self.epsilon,
        "exclude_from_weight_decay": self.exclude_from_weight_decay_patterns,
    })
    return config


class AdamWeightDecay(_DecoupledDecayOptimizer):
  """The original AdamWeightDecayOptimizer: Adam without bias correction, decoupled decay.

  bias_correction=True (not the original's) scales the step as Adam does, by
  sqrt(1 - b2^t) / (1 - b1^t) at step t, with epsilon added to sqrt(v) as in tf.keras Adam (torch's
  AdamW adds it to the corrected sqrt(v), a difference of order epsilon).
  """

  def __init__(self, learning_rate, name="AdamWeightDecay", bias_correction=False, **kwargs):
    super().__init__(learning_rate, name=name, **kwargs)
    self.bias_correction = bias_correction

  def update_step(self, gradient, variable):
    lr = tf.cast(self.learning_rate, variable.dtype)
    # The decay term uses the weights before this step's Adam term, as the original's single
    # update did, so applying it first gives the same result. w * (1 - lr * rate) is one pass
    # over w; w - lr * rate * w would be two.
    if self.do_use_weight_decay(variable.name):
      variable.assign(variable * (1.0 - lr * self.weight_decay_rate))
    index = self._index_dict[self._var_key(variable)]
    # The fused Adam kernel with beta powers of 0 is Adam without bias correction, exactly the
    # original's m / (sqrt(v) + eps) step, in one pass over memory instead of a dozen.
    beta1_power = beta2_power = tf.constant(0.0, variable.dtype)
    if self.bias_correction:
      step = tf.cast(self.iterations + 1, variable.dtype)
      beta1_power = tf.pow(tf.constant(self.beta_1, variable.dtype), step)
      beta2_power = tf.pow(tf.constant(self.beta_2, variable.dtype), step)
    tf.raw_ops.ResourceApplyAdam(
        var=variable.handle, m=self._m[index].handle, v=self._v[index].handle,
        beta1_power=beta1_power, beta2_power=beta2_power,
        lr=lr, beta1=tf.constant(self.beta_1, variable.dtype),
        beta2=tf.constant(self.beta_2, variable.dtype),
        epsilon=tf.constant(self.epsilon, variable.dtype),
        grad=tf.convert_to_tensor(gradient), use_locking=False)

  def get_config(self):
    config = super().get_config()
    config["bias_correction"] = self.bias_correction
    return config


class Lamb(_DecoupledDecayOptimizer):
  """LAMB (You et al. 2019): Adam with bias correction and a per-layer trust ratio.

  The trust ratio ||p|| / ||update|| is skipped (taken as 1) for the variables excluded from
  weight decay, as in the reference implementation, and when either norm is zero.
  """

  def __init__(self, learning_rate, name="Lamb", **kwargs):
    super().__init__(learning_rate, name=name, **kwargs)

  def update_step(self, gradient, variable):
    m, v = self._moments(gradient, variable)
    step = tf.cast(self.iterations + 1, variable.dtype)
    m_hat = m / (1.0 - tf.pow(tf.cast(self.beta_1, variable.dtype), step))
    v_hat = v / (1.0 - tf.pow(tf.cast(self.beta_2, variable.dtype), step))
    update = m_hat / (tf.sqrt(v_hat) + self.epsilon)
    if self.do_use_weight_decay(variable.name):
      update += self.weight_decay_rate * variable
    ratio = 1.0
    if not self.is_excluded(variable.name):
      w_norm = tf.norm(variable)
      u_norm = tf.norm(update)
      ratio = tf.where(tf.logical_and(w_norm > 0, u_norm > 0), w_norm / u_norm, 1.0)
    variable.assign_sub(tf.cast(self.learning_rate, variable.dtype) * ratio * update)


def create_optimizer(init_lr, num_train_steps, num_warmup_steps, optimizer_type="adamw",
                     weight_decay_rate=0.01, clip_norm=1.0, beta_1=0.9, beta_2=0.999,
                     epsilon=1e-6, exclude_from_weight_decay=EXCLUDE_FROM_WEIGHT_DECAY,
                     adam_bias_correction=False):
  """The original's optimizer set-up (schedule, decay, clipping) as a tf_keras optimizer.

  adam_bias_correction=True gives "adamw" Adam's bias correction (see AdamWeightDecay); LAMB always
  has it. Gradients are clipped to the dense global norm `clip_norm` (after the cross-replica sum)
  by the optimizer itself; clip_norm=None clips nothing (bert_tf.training.loop clips by the rule it is
  given, then applies). optimizer.iterations is the global step.
  """
  if optimizer_type not in OPTIMIZER_TYPES:
    raise BertTfError(f"--optimizer: {optimizer_type!r} is not one of {OPTIMIZER_TYPES}")
  if num_train_steps <= 0:
    raise BertTfError(f"--num_train_steps: must be positive, got {num_train_steps}")
  if num_warmup_steps < 0:
    raise BertTfError(f"--num_warmup_steps: must be >= 0, got {num_warmup_steps}")
  schedule = WarmupLinearDecay(init_lr, num_train_steps, num_warmup_steps)
  kwargs = dict(weight_decay_rate=weight_decay_rate, beta_1=beta_1, beta_2=beta_2,
                epsilon=epsilon, exclude_from_weight_decay=exclude_from_weight_decay,
                global_clipnorm=clip_norm or None)
  if optimizer_type == "adamw":
    return AdamWeightDecay(schedule, bias_correction=adam_bias_correction, **kwargs)
  return Lamb(schedule, **kwargs)
