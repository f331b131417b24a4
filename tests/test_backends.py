"""bert_tf.serving.backends: predictor.load(..., backend="auto") takes the backend timed fastest
(the timings mocked, but for one real timing), keeps the choice in the user's cache, never in the
export, per export file, machine and batch size; a backend asked for by name wins; one log line
says the backend and why. Tiny classifier exports."""
import json
import logging
import os
import shutil
import types

import pytest

from bert_tf.model.config import BertConfig
from bert_tf.serving import backends
from bert_tf.serving import export
from bert_tf.serving import predictor
from bert_tf.text import fast_tokenization
from support import tiny

SEQ = 16
LABELS = dict(label_list=["0", "1"], pair=False)


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
  """A tiny classifier's export with --tflite's files, and one without."""
  tmp = tmp_path_factory.mktemp("backends")
  vocab_file = tiny.write_vocab(tmp)
  # One layer: saving and converting cost seconds a layer.
  config = BertConfig(vocab_size=len(tiny.WORDS), **dict(tiny.TINY, num_hidden_layers=1))
  model = export.build_model("classifier", config, num_labels=2)
  server = export.make_server("classifier", fast_tokenization.FastTokenizer(vocab_file), model,
                              SEQ, **LABELS)
  with_tflite = export.save(server, str(tmp / "export"), export.tflite_files(
      "classifier", model, vocab_file, True, SEQ, **LABELS))
  # The same SavedModel without --tflite's files (a copy: saving costs seconds; a real export
  # without them is tests/test_tflite.py's).
  plain = shutil.copytree(with_tflite, str(tmp / "plain" / os.path.basename(with_tflite)))
  for name in (export.TFLITE_FILE, export.TFLITE_SERVER_FILE, export.TFLITE_VOCAB_FILE):
    os.remove(os.path.join(plain, name))
  return types.SimpleNamespace(tflite=with_tflite, plain=plain)


@pytest.fixture
def cache(tmp_path, monkeypatch):
  monkeypatch.setenv("BERT_TF_CACHE_DIR", str(tmp_path / "cache"))
  return tmp_path / "cache"


@pytest.fixture
def timings(monkeypatch):
  """backends.measure replaced: it returns .seconds ({backend: {batch size: s}}) and counts its
  calls, after checking it was given both backends' predictors."""
  state = types.SimpleNamespace(calls=0, seconds=None)

  def measure(loaded, batch_size):
    assert {name: p.backend for name, p in loaded.items()} == {"savedmodel": "savedmodel",
                                                               "tflite": "tflite"}
    state.calls += 1
    return {name: {size: s for size, s in times.items() if size in (1, batch_size)}
            for name, times in state.seconds.items()}

  monkeypatch.setattr(backends, "measure", measure)
  return state


@pytest.fixture
def opened(monkeypatch):
  """predictor's opening of an export's backend replaced by a stand-in (loading a SavedModel
  costs seconds): [backend names opened], in order."""
  names = []

  def open_backend(version, backend, batch_size, dtype="float32"):
    names.append(backend)
    return types.SimpleNamespace(backend=backend, task="classifier", version=version,
                                 batch_size=batch_size)

  monkeypatch.setattr(predictor, "_from_export", open_backend)
  return names


TFLITE_SLOWER = {"savedmodel": {1: 0.020, 4: 0.050}, "tflite": {1: 0.030, 4: 0.070}}
TFLITE_FASTER = {"savedmodel": {1: 0.030, 4: 0.070}, "tflite": {1: 0.020, 4: 0.050}}


def _messages(caplog):
  return [r.getMessage() for r in caplog.records if "predictor backend" in r.getMessage()]


def _tree(directory):
  return sorted((root, tuple(sorted(files)), os.path.getmtime(root))
                for root, _, files in os.walk(directory))


def test_decide_takes_the_least_worst_slowdown():
  assert backends.decide(TFLITE_FASTER) == "tflite"
  assert backends.decide(TFLITE_SLOWER) == "savedmodel"
  # Each faster at one batch size: the one that loses least where it loses.
  assert backends.decide({"savedmodel": {1: 0.030, 32: 0.40},
                          "tflite": {1: 0.020, 32: 0.42}}) == "tflite"
  assert backends.decide({"savedmodel": {1: 0.021, 32: 0.40},
                          "tflite": {1: 0.020, 32: 0.60}}) == "savedmodel"


@pytest.mark.parametrize("seconds, fastest", [(TFLITE_SLOWER, "savedmodel"),
                                              (TFLITE_FASTER, "tflite")])
def test_auto_takes_the_faster_and_keeps_it_in_the_cache(exports, cache, timings, opened, caplog,
                                                         seconds, fastest):
  caplog.set_level(logging.INFO, logger="absl")
  before = _tree(os.path.dirname(exports.tflite))
  timings.seconds = seconds
  loaded = predictor.load(exports.tflite, batch_size=4)
  assert (loaded.backend, timings.calls, opened) == (fastest, 1, ["savedmodel", "tflite"])
  [line] = _messages(caplog)
  assert f"predictor backend {fastest} for {exports.tflite}" in line
  assert "loaded and timed in" in line
  assert "batch 1: " in line and "batch 4: " in line
  assert os.listdir(cache) == ["backends.json"]
  assert _tree(os.path.dirname(exports.tflite)) == before  # nothing written beside the export
  # Loaded again: the kept choice alone is opened, not timed again, even where a timing now
  # would differ.
  timings.seconds = TFLITE_FASTER if seconds is TFLITE_SLOWER else TFLITE_SLOWER
  caplog.clear()
  assert predictor.load(exports.tflite, batch_size=4).backend == fastest
  assert (timings.calls, opened[2:]) == (1, [fastest])
  [line] = _messages(caplog)
  assert "timed before on this machine" in line and str(cache) in line
  # Another batch size is another measure.
  assert predictor.load(exports.tflite, batch_size=1).backend != fastest
  assert timings.calls == 2


def test_a_changed_export_is_timed_again(exports, cache, timings, opened, tmp_path):
  copy = shutil.copytree(exports.tflite, str(tmp_path / "copy"))
  timings.seconds = TFLITE_FASTER
  for _ in range(2):
    assert predictor.load(copy, batch_size=4).backend == "tflite"
  assert timings.calls == 1
  tflite_file = os.path.join(copy, export.TFLITE_FILE)
  os.utime(tflite_file, ns=(0, os.stat(tflite_file).st_mtime_ns + 10**9))
  timings.seconds = TFLITE_SLOWER
  assert predictor.load(copy, batch_size=4).backend == "savedmodel"
  assert timings.calls == 2


def test_a_backend_asked_for_wins(exports, cache, timings, opened, caplog):
  caplog.set_level(logging.INFO, logger="absl")
  timings.seconds = TFLITE_FASTER
  assert predictor.load(exports.tflite, batch_size=4).backend == "tflite"
  caplog.clear()
  assert predictor.load(exports.tflite, batch_size=4, backend="savedmodel").backend == "savedmodel"
  timings.seconds = TFLITE_SLOWER
  assert predictor.load(exports.tflite, batch_size=2, backend="tflite").backend == "tflite"
  assert timings.calls == 1 and opened[2:] == ["savedmodel", "tflite"]
  assert ["asked for" in line for line in _messages(caplog)] == [True, True]


def test_an_export_without_tflite_is_served_by_its_savedmodel(exports, cache, timings, opened,
                                                              caplog):
  caplog.set_level(logging.INFO, logger="absl")
  assert predictor.load(exports.plain).backend == "savedmodel"
  assert timings.calls == 0 and opened == ["savedmodel"] and not cache.exists()
  [line] = _messages(caplog)
  assert "holds no" in line and "--tflite" in line


def test_output_dir_auto_is_its_savedmodel():
  assert backends.for_output_dir("out", "auto") == "savedmodel"
  assert backends.for_output_dir("out", "tflite") == "tflite"


def test_an_unwritable_cache_times_every_load(exports, tmp_path, monkeypatch, timings, opened,
                                              caplog):
  blocker = tmp_path / "a_file"
  blocker.write_text("")
  monkeypatch.setenv("BERT_TF_CACHE_DIR", str(blocker / "cache"))  # cannot be made, even by root
  caplog.set_level(logging.INFO, logger="absl")
  timings.seconds = TFLITE_FASTER
  for _ in range(2):
    assert predictor.load(exports.tflite, batch_size=4).backend == "tflite"
  assert timings.calls == 2
  assert any("cannot keep a measured choice" in r.getMessage() for r in caplog.records)
  assert all("kept in" not in line for line in _messages(caplog))


def test_auto_times_both_on_the_exports_longest_inputs(exports, cache, caplog):
  """Unmocked: both backends opened and timed at batch 1 and 3 on inputs of max_seq_length
  vocabulary words; the predictor chosen serves, and the kept timings say why."""
  caplog.set_level(logging.INFO, logger="absl")
  loaded = predictor.load(exports.tflite, batch_size=3)
  assert loaded(["the movie was good"])[0]["label"] in ("0", "1")
  [kept] = json.loads((cache / "backends.json").read_text()).values()
  seconds = kept["value"]["seconds"]
  assert set(seconds) == set(backends.MEASURED)
  assert all(set(times) == {"1", "3"} and min(times.values()) > 0 for times in seconds.values())
  assert kept["value"]["backend"] == loaded.backend == backends.decide(seconds)
  assert f"predictor backend {loaded.backend}" in _messages(caplog)[0]
  other = predictor.load(exports.tflite, batch_size=3,
                         backend="savedmodel" if loaded.backend == "tflite" else "tflite")
  inputs = backends.probe_inputs({p.backend: p for p in (loaded, other)}, 2)
  assert list(inputs) == ["text_a"] and len(inputs["text_a"]) == 2
  assert all(len(text.split()) == SEQ and set(text.split()) <= set(tiny.WORDS)
             for text in inputs["text_a"])
