"""--dtype: auto's choice, the warning for emulated bfloat16 (CPU flags and probe timings passed in,
so nothing here depends on this machine's CPU), the probe itself, and what runs in float32 under
mixed_bfloat16."""
import collections
import json
from unittest import mock

import pytest
import tensorflow as tf
import tf_keras

from bert_tf.errors import BertTfError
from bert_tf.drivers import pretraining
from bert_tf.model.config import BertConfig
from bert_tf.model import heads
from bert_tf.model import modeling
from bert_tf.training import dtype_probe
from bert_tf.training import runtime
from bert_tf.training import precision

_real_measure = dtype_probe.measure

AVX2_ONLY = ("processor\t: 0\nvendor_id\t: AuthenticAMD\n"
             "flags\t\t: fpu sse sse2 avx avx2 fma bmi2\nprocessor\t: 1\n"
             "flags\t\t: fpu sse sse2 avx avx2 fma bmi2\n")
AVX512_BF16 = "flags\t\t: fpu avx2 avx512f avx512_bf16 avx512_vnni\n"
SAPPHIRE_RAPIDS = "flags\t\t: avx2 avx512f avx512_bf16 amx_bf16 amx_tile amx_int8\n"
GRAVITON3 = "processor\t: 0\nFeatures\t: fp asimd sve bf16 i8mm\n"
GRAVITON2 = "processor\t: 0\nFeatures\t: fp asimd atomics\n"


def test_cpu_bf16_flags_read_from_cpuinfo_text():
  assert precision.cpu_bf16_flags(AVX2_ONLY) == []
  assert precision.cpu_bf16_flags(AVX512_BF16) == ["avx512_bf16"]
  assert precision.cpu_bf16_flags(SAPPHIRE_RAPIDS) == ["amx_bf16", "avx512_bf16"]
  assert precision.cpu_bf16_flags(GRAVITON3) == ["bf16"]
  assert precision.cpu_bf16_flags(GRAVITON2) == []
  assert precision.cpu_bf16_flags("") is None  # no /proc/cpuinfo: unknown, not "none"


# Probe timings (float32 s, bfloat16 s) of one layer's training step.
FASTER_BF16 = (0.200, 0.150)  # the AVX512_BF16 EPYC's kind: 1.33x
SLOWER_BF16 = (0.130, 0.212)  # the AVX512_BF16 Xeon's kind: 0.6x
BARELY_FASTER = (0.200, 0.190)  # 1.05x: within the probe's noise


@pytest.mark.parametrize("device,capabilities,cpuinfo,timings,expected", [
    ("tpu", (), AVX2_ONLY, None, "bfloat16"),
    ("gpu", ((8, 0),), AVX2_ONLY, None, "bfloat16"),
    ("gpu", ((9, 0), (9, 0)), "", None, "bfloat16"),
    ("gpu", ((7, 0),), SAPPHIRE_RAPIDS, None, "float32"),  # V100: no bf16 tensor cores
    ("gpu", ((8, 6), (7, 5)), AVX2_ONLY, None, "float32"),  # every GPU must have them
    ("gpu", (), AVX2_ONLY, None, "float32"),  # capability unknown
    ("cpu", (), AVX512_BF16, FASTER_BF16, "bfloat16"),
    ("cpu", (), AVX512_BF16, SLOWER_BF16, "float32"),  # the instructions alone do not decide
    ("cpu", (), AVX512_BF16, BARELY_FASTER, "float32"),
    ("cpu", (), AVX512_BF16, None, "float32"),  # not measured: no claim
    ("cpu", (), SAPPHIRE_RAPIDS, FASTER_BF16, "bfloat16"),
    ("cpu", (), GRAVITON3, FASTER_BF16, "bfloat16"),
    ("cpu", (), GRAVITON3, SLOWER_BF16, "float32"),
    ("cpu", (), AVX2_ONLY, FASTER_BF16, "float32"),  # emulated: never measured, never chosen
    ("cpu", (), "", None, "float32"),
])
def test_auto_chooses_bfloat16_only_where_it_is_measured_faster(device, capabilities, cpuinfo,
                                                               timings, expected):
  chosen, why = precision.choose("auto", device, capabilities, cpuinfo, timings)
  assert chosen == expected and why and "\n" not in why
  if timings and precision.cpu_bf16_flags(cpuinfo):  # the line says what was measured
    assert f"{1e3 * timings[1]:.0f} ms in bfloat16 and {1e3 * timings[0]:.0f} ms" in why
  for dtype in precision.PRECISIONS:  # an explicit --dtype is kept as given
    assert precision.choose(dtype, device, capabilities, cpuinfo, timings) == (dtype, None)


def test_the_probe_times_both_precisions_and_caches_per_machine(tmp_path, monkeypatch):
  monkeypatch.setenv("BERT_TF_CACHE_DIR", str(tmp_path))
  calls = []
  monkeypatch.setattr(dtype_probe, "measure",
                      lambda config, seq: calls.append((config.hidden_size, seq)) or (0.2, 0.15))
  cpu = "model name\t: Some CPU\n" + AVX512_BF16
  assert dtype_probe.timings(TINY, 8, cpu, ["avx512_bf16"]) == (0.2, 0.15, False)
  assert dtype_probe.timings(TINY, 8, cpu, ["avx512_bf16"]) == (0.2, 0.15, True)
  assert calls == [(16, 8)]  # measured once: the second came from the cache
  dtype_probe.timings(TINY, 16, cpu, ["avx512_bf16"])  # another sequence length: measured
  assert calls == [(16, 8), (16, 16)]
  assert "Some CPU" in next(iter(json.loads((tmp_path / f"{dtype_probe.CACHE_KIND}.json").read_text())))
  # Measured for real, on this machine, on a tiny layer: two positive step times.
  float32, bfloat16 = _real_measure(TINY, 8, rounds=1)
  assert float32 > 0 and bfloat16 > 0


def test_resolve_probes_only_a_cpu_with_bfloat16_instructions(monkeypatch):
  probed = []
  monkeypatch.setattr(dtype_probe, "timings",
                      lambda *args: probed.append(args[1]) or (0.13, 0.212, True))
  with mock.patch.object(precision.logging, "info") as info:
    assert precision.resolve("auto", cpuinfo=AVX512_BF16, config=TINY, seq_length=8) == "float32"
    assert "measured on this machine before, cached in" in info.call_args[0][2]
    assert precision.resolve("auto", cpuinfo=AVX2_ONLY, config=TINY, seq_length=8) == "float32"
    assert precision.resolve("bfloat16", cpuinfo=AVX512_BF16, config=TINY) == "bfloat16"
  assert probed == [8]


def test_emulation_warning_only_for_bfloat16_on_a_cpu_without_it():
  warning = precision.emulation_warning("bfloat16", "cpu", AVX2_ONLY)
  assert "\n" not in warning and "slower than float32" in warning and "avx512_bf16" in warning
  assert precision.emulation_warning("bfloat16", "cpu", SAPPHIRE_RAPIDS) is None
  assert precision.emulation_warning("bfloat16", "cpu", GRAVITON3) is None
  assert precision.emulation_warning("bfloat16", "cpu", "") is None  # flags unknown: no claim
  assert precision.emulation_warning("bfloat16", "gpu", AVX2_ONLY) is None
  assert precision.emulation_warning("bfloat16", "tpu", AVX2_ONLY) is None
  assert precision.emulation_warning("float32", "cpu", AVX2_ONLY) is None
  assert precision.emulation_warning("float16", "cpu", AVX2_ONLY) is None


def test_set_precision_resolves_auto_logs_why_and_warns_once(monkeypatch):
  """On this (GPU-less) test process: the CPU flags and the (here mocked) probe decide."""
  monkeypatch.setattr(dtype_probe, "timings", lambda *args: FASTER_BF16 + (True,))
  try:
    with mock.patch.object(precision.logging, "info") as info, \
        mock.patch.object(precision.logging, "warning") as warning:
      assert runtime.set_precision("auto", cpuinfo=SAPPHIRE_RAPIDS) == "bfloat16"
      assert tf_keras.mixed_precision.global_policy().name == "mixed_bfloat16"
      assert "--dtype=auto: %s (%s)" == info.call_args[0][0]
      assert info.call_args[0][1] == "bfloat16"
      assert info.call_args[0][2].startswith(precision.choose(
          "auto", "cpu", (), SAPPHIRE_RAPIDS, FASTER_BF16)[1])
      warning.assert_not_called()
      assert runtime.set_precision("auto", cpuinfo=AVX2_ONLY) == "float32"
      assert tf_keras.mixed_precision.global_policy().name == "float32"
      warning.assert_not_called()
      assert runtime.set_precision("bfloat16", cpuinfo=AVX2_ONLY) == "bfloat16"
      warning.assert_called_once_with(precision.emulation_warning("bfloat16", "cpu", AVX2_ONLY))
      assert runtime.set_precision("float16", cpuinfo=AVX2_ONLY) == "float16"
      assert tf_keras.mixed_precision.global_policy().name == "mixed_float16"
      assert warning.call_count == 1
    with pytest.raises(BertTfError, match="--dtype: 'bf16' is not one of .*auto"):
      runtime.set_precision("bf16")
  finally:
    runtime.set_precision("float32")


def test_the_precision_list_is_defined_once():
  from bert_tf.cli import flags as bert_flags  # pylint: disable=g-import-not-at-top
  from bert_tf.training.options import RuntimeOptions  # pylint: disable=g-import-not-at-top
  bert_flags.define_flags(RuntimeOptions, only=("dtype",))
  assert tuple(bert_flags.FLAGS["dtype"].parser.enum_values) == precision.CHOICES
  assert not hasattr(runtime, "PRECISIONS")  # it reads precision.PRECISIONS
  assert bert_flags.FLAGS["dtype"].default == "float32"
  assert precision.AUTO_RULE in bert_flags.FLAGS["dtype"].help


# The script-level test of --dtype=auto (run_classifier and export_savedmodel picking float32
# here) is the dry run of bench/device_check/device_check.sh: tests/test_device_check.py.


# ------------------------------------------------------------- what runs in float32 under bf16

TINY = BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                  intermediate_size=24, max_position_embeddings=16)


def _training_step_ops(model, loss_fn, features):
  """({op type: {output dtypes}} of one traced training step's forward, loss and gradients, the
  gradients' dtypes), traced without running."""

  @tf.function
  def step(features):
    with tf.GradientTape() as tape:
      loss = loss_fn(features, model(features, training=True))
    return loss, tape.gradient(loss, model.trainable_variables)

  concrete = step.get_concrete_function(features)
  dtypes = collections.defaultdict(set)
  for op in concrete.graph.get_operations():
    for output in op.outputs:
      if output.dtype.is_floating:
        dtypes[op.type].add(output.dtype.name)
  gradient_dtypes = {t.dtype.name for t in tf.nest.flatten(concrete.structured_outputs[1],
                                                          expand_composites=True)
                     if t.dtype.is_floating}
  return dtypes, gradient_dtypes


@pytest.mark.parametrize("task", ["classifier", "pretrainer"])
def test_mixed_bfloat16_keeps_softmax_layernorm_loss_logits_and_gradients_in_float32(task):
  ids = tf.constant([[2, 5, 6, 3, 0, 0]] * 2)
  features = {"input_ids": ids, "input_mask": tf.cast(ids > 0, tf.int32),
              "segment_ids": tf.zeros_like(ids), "label_ids": tf.constant([0, 1])}
  runtime.set_precision("bfloat16", cpuinfo=SAPPHIRE_RAPIDS)
  try:
    if task == "classifier":
      model = heads.BertClassifier(TINY, num_labels=2)
      loss_fn = lambda f, o: heads.sparse_cross_entropy(f["label_ids"], o["logits"])
      logits = ("logits",)
    else:
      model = modeling.BertPretrainer(TINY)
      features.update(masked_lm_positions=tf.constant([[1, 2]] * 2),
                      masked_lm_ids=tf.constant([[5, 6]] * 2),
                      masked_lm_weights=tf.ones([2, 2]),
                      next_sentence_labels=tf.constant([[0], [1]]))
      loss_fn = pretraining.loss_fn()
      logits = ("mlm_logits", "nsp_logits")
    outputs = model(features, training=True)
    dtypes, gradient_dtypes = _training_step_ops(model, loss_fn, features)
  finally:
    runtime.set_precision("float32")
  assert {outputs[name].dtype for name in logits} == {tf.float32}
  assert dtypes["MatMul"] >= {"bfloat16"}  # the policy is on: the dense layers run in bf16
  assert dtypes["Softmax"] == {"float32"}  # attention probabilities
  assert dtypes["Mean"] == dtypes["SquaredDifference"] == dtypes["Rsqrt"] == {"float32"}  # LN
  # The variables are float32, so are their gradients, and so is the optimizer's global-norm
  # clip of them (bert_tf.training.optimization).
  assert gradient_dtypes == {"float32"}
  if task == "classifier":  # the fused op, or its log-softmax form under op determinism
    assert dtypes["SparseSoftmaxCrossEntropyWithLogits"] | dtypes["LogSoftmax"] == {"float32"}
  else:  # pretraining's own cross-entropy: log-sum-exp of the float32 logits
    assert dtypes["Exp"] == dtypes["Log"] == {"float32"}
