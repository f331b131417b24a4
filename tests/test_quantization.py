"""Reduced-precision exports and serving (bert_tf.serving.reduced, guard, openvino_runner): an
export with --dtype=bfloat16 --tflite --quantize=int8 writes its bfloat16 SavedModel, its int8
files and its accuracy check (assets.extra/quantization.json, and the closing lines); each backend
serves results close to float32's in each precision; auto picks a reduced precision only when
dtype asks for it; the guard refuses a broken quantization in one line naming both figures and
keeps the float32 version; without openvino, one line says so; --quantize's misuse is one line.
A tiny one-layer classifier on synthetic SST-2 rows, whose check rows are labelled with its own
float32 predictions (float32 scores 100 on them: any path that flips labels loses)."""
import json
import os
import shutil
import sys
import types

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from bert_tf.errors import BertTfError
from bert_tf.drivers import finetune_options
from bert_tf.io import integrity
from bert_tf.model.config import BertConfig
from bert_tf.serving import backends
from bert_tf.drivers import exporting
from bert_tf.serving import export
from bert_tf.serving import guard
from bert_tf.serving import openvino_runner
from bert_tf.serving import predictor
from bert_tf.serving import tflite
from bert_tf.tasks import base
from bert_tf.training import machine
from support import models
from support import task_data
from support import tiny
from support.script_runner import run_script

SEQ = 16
SENTENCES = ["the movie was good", "a very bad plot", "the story is fine", "awful acting",
             "the film was really good", "bad"]
needs_openvino = pytest.mark.skipif(not openvino_runner.available(),
                                    reason="openvino is not installed (requirements-test.txt)")


@pytest.fixture(scope="module")
def made(tmp_path_factory):
  """A tiny classifier's checkpoint, data (train.tsv, dev.tsv) and check file (dev rows labelled
  by its float32 predictions), and one export_savedmodel.py run with --dtype=bfloat16 --tflite
  --quantize=int8."""
  tmp = tmp_path_factory.mktemp("quantization")
  task_data.synthetic_sst2(tmp / "data", seed=0, n=60)
  config = BertConfig(**dict(tiny.TINY, vocab_size=len(tiny.WORDS), num_hidden_layers=1))
  (tmp / "bert_config.json").write_text(json.dumps(config.to_dict()))
  vocab = tiny.write_vocab(tmp)
  tf.random.set_seed(4)
  model = export.build_model("classifier", config, num_labels=2)
  models.randomize(model, seed=4)
  for variable in model.variables:  # a spread of weights whose outputs differ from row to row
    if "gamma" not in variable.name:
      variable.assign(4.0 * variable)
  tf.train.Checkpoint(model=model).save(str(tmp / "ckpt" / "ckpt"))
  server = export.build_server("classifier", config, vocab, True, str(tmp / "ckpt"), SEQ,
                               label_list=["0", "1"], pair=False)
  float32 = predictor.for_server(server)
  texts = [line.split("\t")[0] for line in (tmp / "data" / "dev.tsv").read_text().splitlines()[1:]]
  # The check rows: those float32 labels with a margin no reduced precision here crosses.
  rows = [(text, r["label"]) for text, r in zip(texts, float32(texts))
          if abs(r["scores"]["1"] - 0.5) > 0.1]
  assert len({label for _, label in rows}) == 2  # both labels: a flipped path loses points
  (tmp / "check.tsv").write_text("sentence\tlabel\n" + "".join(
      f"{text}\t{label}\n" for text, label in rows))
  flags = [f"--bert_config_file={tmp / 'bert_config.json'}", f"--vocab_file={vocab}",
           f"--init_checkpoint={tmp / 'ckpt'}", "--task=glue", "--task_name=SST-2",
           f"--max_seq_length={SEQ}", f"--data_dir={tmp / 'data'}"]
  done = run_script("export_savedmodel.py", *flags, f"--export_dir={tmp / 'export'}", "--tflite",
                    "--quantize=int8", "--dtype=bfloat16", "--calibration_examples=20",
                    f"--quantization_check_file={tmp / 'check.tsv'}", timeout=300)
  assert done.returncode == 0, done.stderr[-3000:]
  return types.SimpleNamespace(tmp=tmp, config=config, vocab=vocab, flags=flags, done=done,
                               rows=len(rows),
                               version=export.resolve(str(tmp / "export")), float32=float32)


def test_the_figures_land_in_the_export_and_its_closing_lines(made):
  doc = guard.read_records(made.version)
  assert doc["metric"] == "eval_accuracy" and doc["max_loss"] == 0.5
  assert doc["float32"]["eval_accuracy"] == 1.0  # the check rows are its own predictions
  assert doc["check"] == {"source": str(made.tmp / "check.tsv"), "rows": made.rows,
                          "what": "dev examples"}
  assert doc["calibration"]["examples"] == 20 and doc["calibration"]["seed"] == 12345
  assert doc["savedmodel_dtype"] == "bfloat16" and doc["quantize"] == "int8"
  paths = {"savedmodel/bfloat16", "tflite/int8"}
  if openvino_runner.available():
    paths |= {"openvino/int8"} | ({"openvino/bfloat16"} if openvino_runner.cpu_has_bf16()
                                  else set())
  assert set(doc["paths"]) == paths
  for key, record in doc["paths"].items():
    accuracy = record["metrics"]["eval_accuracy"]
    assert record["agreement"] == pytest.approx(accuracy) and record["accepted"], key
    assert record["loss"] == pytest.approx(100 * (1 - accuracy)) and record["loss"] <= 0.5
    for name in record["files"]:
      assert os.path.getsize(os.path.join(made.version, name)) > 1000, name
  assert os.path.exists(os.path.join(made.version, export.TFLITE_INT8_FILE))
  closing = made.done.stdout + made.done.stderr
  assert "float32 eval_accuracy = 100" in closing
  assert "TensorFlow Lite int8 eval_accuracy = " in closing and "% agree" in closing


def _close(results, want, atol):
  assert [r["label"] for r in results] == [r["label"] for r in want]
  for got, expected in zip(results, want):
    assert got["scores"] == pytest.approx(expected["scores"], abs=atol)


@pytest.mark.parametrize("backend, dtype, atol", [
    ("savedmodel", "bfloat16", 0.02), ("tflite", "float32", 1e-5), ("tflite", "int8", 0.1),
    ("openvino", "float32", 1e-4), ("openvino", "bfloat16", 0.02), ("openvino", "int8", 0.1)])
def test_each_backend_serves_close_to_float32(made, backend, dtype, atol):
  if backend == "openvino" and not openvino_runner.available():
    pytest.skip("openvino is not installed (requirements-test.txt)")
  if (backend, dtype) == ("openvino", "bfloat16") and not openvino_runner.cpu_has_bf16():
    with pytest.raises(BertTfError, match="needs a CPU with bfloat16 instructions"):
      predictor.load(made.version, backend=backend, dtype=dtype)
    return
  loaded = predictor.load(made.version, backend=backend, dtype=dtype)
  assert (loaded.backend, loaded.dtype) == (backend, dtype)
  _close(loaded(SENTENCES), made.float32(SENTENCES), atol)


def test_bfloat16_that_the_cpu_would_emulate_is_served_with_a_warning(made, monkeypatch):
  # Where the CPU's flags name no bfloat16 instructions, TensorFlow still serves the bfloat16
  # SavedModel, emulated, at about 0.4x float32's speed: the load says so, and only for it.
  monkeypatch.setattr(predictor.machine, "read_cpuinfo",
                      lambda path="/proc/cpuinfo": "flags\t\t: fpu sse2 avx avx2 fma\n")
  warnings = []
  monkeypatch.setattr(predictor.logging, "warning", lambda msg, *a: warnings.append(msg % a))
  predictor.load(made.version, backend="tflite", dtype="float32")
  assert not [w for w in warnings if "emulated" in w]
  predictor.load(made.version, backend="savedmodel", dtype="bfloat16")
  assert [w for w in warnings if "emulated" in w] == [
      "dtype=bfloat16 on a CPU without bfloat16 instructions (no avx512_bf16 or amx_bf16 in "
      "/proc/cpuinfo) and no GPU or TPU in use: bfloat16 is emulated here and runs slower than "
      "float32; dtype=float32 (or auto) is faster on this machine"]


@needs_openvino
def test_openvino_int8_without_int8_dot_products_is_served_with_a_warning(made, monkeypatch,
                                                                        opened, tmp_path):
  # On an AVX2-only CPU OpenVINO's int8 ran slower than its float32: a load that names it says
  # so; auto (which times it against TensorFlow Lite's) and CPUs with VNNI or AVX-512 do not.
  version = _quantized_with(made, tmp_path, "enable")  # as such a CPU makes it
  cpu = {"flags": "flags\t\t: fpu sse2 avx avx2 fma\n"}
  monkeypatch.setattr(predictor.machine, "read_cpuinfo", lambda path="/proc/cpuinfo": cpu["flags"])
  warnings = []
  monkeypatch.setattr(predictor.logging, "warning", lambda msg, *a: warnings.append(msg % a))
  predictor.load(version, backend="openvino", dtype="int8")
  predictor.load(version, dtype="int8")
  predictor.load(version, backend="openvino", dtype="float32")
  cpu["flags"] = "flags\t\t: fpu avx2 avx_vnni\n"
  predictor.load(version, backend="openvino", dtype="int8")
  assert [w for w in warnings if "int8" in w] == [
      "dtype=int8 on backend='openvino' on a CPU without int8 dot products (AVX2, no avx_vnni, "
      "avx512_vnni or amx_int8 in /proc/cpuinfo): OpenVINO's int8 runs slower than its float32 "
      "here; backend='tflite' (or auto) serves int8 faster on this machine"]
  for flags in ("flags\t\t: avx2 avx512f avx512bw\n", "Features\t: fp asimd i8mm\n", ""):
    assert openvino_runner.int8_warning(flags) is None
  # Its int8 models made without VNNI keep their int8 sums from saturating (the whole suite's
  # OpenVINO int8 checks pass on such a CPU only so).
  assert [openvino_runner.overflow_fix(flags) for flags in (
      "flags\t\t: avx2 fma\n", "flags\t\t: avx2 avx512f avx512bw\n", "flags\t\t: avx2 avx_vnni\n",
      "flags\t\t: avx2 avx512f avx512_vnni\n", "Features\t: fp asimd\n", "")] == [
      "enable", "enable", "first_layer_only", "first_layer_only", "first_layer_only",
      "first_layer_only"]


def _quantized_with(made, tmp_path, fix):
  """A copy of the export's version whose OpenVINO int8 model records NNCF's overflow fix `fix`
  (the model is the same: the record is what the load reads)."""
  version = tmp_path / fix / os.path.basename(made.version)
  shutil.copytree(made.version, version)
  xml = version / export.OPENVINO_INT8_FILES["model.xml"]
  text, made_with = xml.read_text(), openvino_runner.made_overflow_fix(str(xml))
  assert made_with == openvino_runner.overflow_fix(machine.read_cpuinfo())  # as this CPU made it
  xml.write_text(text.replace(f"'overflow_fix': '{made_with}'", f"'overflow_fix': '{fix}'"))
  os.remove(version / integrity.CHECKSUMS_FILE)  # the export's record of its files, made anew
  integrity.write_checksums(str(version))
  assert openvino_runner.made_overflow_fix(str(xml)) == fix
  return str(version)


@needs_openvino
def test_openvino_int8_made_with_the_full_range_is_refused_where_it_would_saturate(
    made, monkeypatch, opened, tmp_path):
  # A model quantized on a CPU with VNNI (NNCF's full int8 range) may saturate its int8 sums on
  # one without VNNI, where its check never ran: the load refuses it there in one line; auto
  # serves TensorFlow Lite's; a model made with the fix, another CPU, or an unchecked load serve.
  full, fixed = (_quantized_with(made, tmp_path, fix) for fix in ("first_layer_only", "enable"))
  cpu = {"flags": "flags\t\t: fpu sse2 avx avx2 fma\n"}
  monkeypatch.setattr(backends.machine, "read_cpuinfo", lambda path="/proc/cpuinfo": cpu["flags"])
  with pytest.raises(BertTfError, match=r"^backend='openvino' dtype=int8: .*openvino_int8\.xml "
                                        r"was quantized without NNCF's overflow fix .* export it "
                                        r"again on this kind of CPU"):
    predictor.load(full, backend="openvino", dtype="int8")
  assert predictor.load(full, dtype="int8").backend == "tflite"
  for version, max_loss in ((fixed, guard.MAX_LOSS), (full, None)):
    assert predictor.load(version, backend="openvino", dtype="int8",
                          max_quantization_loss=max_loss).backend == "openvino"
  cpu["flags"] = "flags\t\t: fpu avx2 avx512f avx512_vnni\n"
  assert predictor.load(full, backend="openvino", dtype="int8").backend == "openvino"
  os.remove(os.path.join(full, export.OPENVINO_INT8_FILES["model.xml"]))
  assert openvino_runner.made_overflow_fix(
      os.path.join(full, export.OPENVINO_INT8_FILES["model.xml"])) is None


@pytest.fixture
def opened(monkeypatch, tmp_path):
  """The predictor's opening of an export's backend replaced by a stand-in (opening costs
  seconds; each real one is test_each_backend_serves_close_to_float32's), and backends.measure
  by timings that make OpenVINO the faster: [(backend, dtype) opened], in order."""
  monkeypatch.setenv("BERT_TF_CACHE_DIR", str(tmp_path / "cache"))
  names = []

  def open_backend(version, backend, batch_size, dtype="float32"):
    names.append((backend, dtype))
    return types.SimpleNamespace(backend=backend, dtype=dtype, task="glue")

  monkeypatch.setattr(predictor, "_from_export", open_backend)
  monkeypatch.setattr(backends, "measure", lambda loaded, batch_size: {
      name: {1: 0.01 if name == "openvino" else 0.02} for name in loaded})
  return names


def test_auto_picks_a_reduced_precision_only_when_dtype_asks(made, opened):
  ov = openvino_runner.available()
  bf16 = ov and openvino_runner.cpu_has_bf16()
  # The export's own precision is its SavedModel's (bfloat16 here): auto times the backends that
  # serve it; float32 is its model.tflite alone (TensorFlow Lite; OpenVINO only when asked).
  assert predictor.load(made.version).dtype == "bfloat16"
  assert opened == ([("savedmodel", "bfloat16"), ("openvino", "bfloat16")] if bf16
                    else [("savedmodel", "bfloat16")])
  loaded = predictor.load(made.version, dtype="float32")
  assert (loaded.backend, loaded.dtype) == ("tflite", "float32")
  loaded = predictor.load(made.version, dtype="int8", batch_size=2)
  assert (loaded.backend, loaded.dtype) == ("openvino" if ov else "tflite", "int8")
  assert opened[-2:] == ([("tflite", "int8"), ("openvino", "int8")] if ov
                         else [("tflite", "float32"), ("tflite", "int8")])
  with pytest.raises(BertTfError, match="backend='tflite': TensorFlow Lite computes float32 or "
                                        "int8 on a CPU, not bfloat16"):
    predictor.load(made.version, backend="tflite", dtype="bfloat16")
  with pytest.raises(BertTfError, match="holds a bfloat16 SavedModel, not float32"):
    predictor.load(made.version, backend="savedmodel", dtype="float32")
  with pytest.raises(BertTfError, match="dtype: expected one of float32, bfloat16, float16, int8"):
    predictor.load(made.version, dtype="int4")


class _Negated(tf_keras.Model):
  """A model whose logits are another's negated: a quantization that flips every label."""

  def __init__(self, model):
    super().__init__()
    self.model = model

  def call(self, inputs, training=False):
    return {"logits": -self.model(inputs, training=training)["logits"]}


def test_the_guard_refuses_a_broken_quantization(made, monkeypatch):
  convert = tflite.convert

  def broken(model, output_keys=None, quantize="none", **kwargs):
    return convert(_Negated(model) if quantize != "none" else model, output_keys, **kwargs)

  monkeypatch.setattr(tflite, "convert", broken)
  monkeypatch.setattr(openvino_runner, "available", lambda: False)  # TensorFlow Lite's path only
  task = base.get("glue")
  options = finetune_options.ExportOptions(
      bert_config_file=str(made.tmp / "bert_config.json"), vocab_file=made.vocab,
      init_checkpoint=str(made.tmp / "ckpt"), export_dir=str(made.tmp / "broken"),
      max_seq_length=SEQ, tflite=True, quantize="dynamic",
      quantization_check_file=str(made.tmp / "check.tsv"),
      task=task.options_class(task_name="SST-2"))
  with pytest.raises(BertTfError) as refused:
    exporting.export_from_options(task, options, made.config, str(made.tmp / "ckpt"))
  [version] = export.versions(str(made.tmp / "broken"))
  version = os.path.join(str(made.tmp / "broken"), str(version))
  assert str(refused.value) == (
      f"--max_quantization_loss: TensorFlow Lite int8 scores eval_accuracy 0.00 against "
      f"float32's 100.00 on {made.rows} dev examples of {made.tmp / 'check.tsv'} (100.00 points "
      f"lost, more than max_quantization_loss 0.5; {made.rows} of {made.rows} differ): not "
      f"exported; {version} holds the float32 model")
  # The float32 version stays: its SavedModel and model.tflite, the figures, no int8 file.
  assert not os.path.exists(os.path.join(version, export.TFLITE_INT8_FILE))
  record = guard.read_records(version)["paths"]["tflite/int8"]
  assert (record["accepted"], record["differ"]) == (False, made.rows)
  _close(predictor.load(version, backend="tflite")(SENTENCES), made.float32(SENTENCES), 1e-5)
  with pytest.raises(BertTfError, match="holds no assets.extra/model_int8.tflite"):
    predictor.load(version, backend="tflite", dtype="int8")


def test_a_load_is_refused_beyond_its_own_limit(made):
  doc = guard.read_records(made.version)
  loss = doc["paths"]["tflite/int8"]["loss"]
  if loss <= 0:
    pytest.skip("int8 lost nothing here: no limit below it to refuse at")
  with pytest.raises(BertTfError, match=r"TensorFlow Lite int8 scores eval_accuracy .* against "
                                        r"float32's 100.00 .*: refused"):
    predictor.load(made.version, backend="tflite", dtype="int8",
                   max_quantization_loss=loss / 2)


def test_without_openvino_one_clear_line(made, monkeypatch, opened):
  monkeypatch.setitem(sys.modules, "openvino", None)  # import openvino: ImportError
  assert not openvino_runner.available()
  with pytest.raises(BertTfError) as absent:
    predictor.load(made.version, backend="openvino", dtype="int8")
  assert str(absent.value) == ("backend='openvino': needs the openvino package, which is not "
                               "installed in this Python (pip install openvino)")
  assert predictor.load(made.version, dtype="int8").backend == "tflite"  # auto: what is here
  assert opened == [("tflite", "int8")]


def test_quantize_misuse_is_one_line(made):
  with pytest.raises(BertTfError, match="--quantize: expected one of none, dynamic, int8, got "
                                        "int4"):
    finetune_options.ExportOptions("c", "v", "i", "e", tflite=True, quantize="int4")
  with pytest.raises(BertTfError, match="--calibration_examples: expected an integer of at least "
                                        "1, got 0"):
    finetune_options.ExportOptions("c", "v", "i", "e", tflite=True, quantize="int8",
                                   calibration_examples=0)
  with pytest.raises(BertTfError, match="--quantize: only with --export_dir|--quantize: only "
                                        "with --tflite"):
    finetune_options.FinetuneOptions(output_dir="out", bert_config_file="c", vocab_file="v",
                                     do_train=True, quantize="int8")
  for args, line in [(["--quantize=int8"], "error: --quantize: only with --tflite (it quantizes "
                                           "the TensorFlow Lite model)"),
                     (["--tflite", "--quantize=int4"], "error: --quantize: expected one of none, "
                                                       "dynamic, int8, got 'int4'"),
                     (["--tflite", "--quantize=int8", "--max_quantization_loss=-1"],
                      "error: --max_quantization_loss: expected a number of at least 0, got -1")]:
    done = run_script("export_savedmodel.py", *made.flags, f"--export_dir={made.tmp / 'bad'}",
                      *args)
    assert done.returncode == 1, (args, done.stderr[-2000:])
    assert done.stderr.strip().splitlines()[-1].startswith(line), done.stderr[-2000:]
  assert not os.path.exists(made.tmp / "bad")
  # A run script checks the rows its export will need before it trains.
  no_dev = made.tmp / "no_dev"
  no_dev.mkdir()
  (no_dev / "train.tsv").write_text((made.tmp / "data" / "train.tsv").read_text())
  done = run_script("run_classifier.py", "--task_name=SST-2", f"--data_dir={no_dev}",
                    *[flag for flag in made.flags if flag.startswith(("--bert", "--vocab", "--init"))],
                    f"--output_dir={made.tmp / 'run'}", "--do_train", "--max_seq_length=16",
                    f"--export_dir={made.tmp / 'run_export'}", "--tflite", "--quantize=int8")
  assert done.returncode == 1, done.stderr[-2000:]
  assert done.stderr.strip().splitlines()[-1] == (
      f"error: --data_dir: {no_dev / 'dev.tsv'}: file not found"), done.stderr[-2000:]
  assert not os.path.exists(made.tmp / "run")


def test_calibration_rows_are_the_servers_inputs_drawn_with_the_seed(made):
  task = base.get("glue")
  own = task.options_class(task_name="SST-2", data_dir=str(made.tmp / "data"))
  source, inputs = guard.calibration_inputs(task, own, 5, seed=1)
  assert source == str(made.tmp / "data" / "train.tsv") and len(inputs["texts"]) == 5
  assert guard.calibration_inputs(task, own, 5, seed=1) == (source, inputs)
  assert guard.calibration_inputs(task, own, 5, seed=2)[1] != inputs
  rows = guard.model_inputs(made.float32, inputs)
  assert len(rows) == 5
  for row, text in zip(rows, inputs["texts"]):
    assert row["input_ids"].shape == (1, len(text.split()) + 2)  # [CLS] words [SEP], unpadded
    np.testing.assert_array_equal(row["input_mask"], 1)
