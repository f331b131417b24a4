"""Damaged files, caches and inputs: what a native library would read (model.tflite, float or
quantized; a SavedModel's graph, variables and tokenizer vocabulary) is checked first, so that no
process dies of a signal; a damaged file is skipped (an export version, TensorFlow Lite under
backend="auto", as TF Serving skips a version that fails to load) or named in one line; a cache of
another shape or that does not parse is measured again with one warning; a damaged run file, a
SQuAD file of wrong types, and distillation's inputs (CRLF vocabularies, a teacher through a
symlink, an infinite temperature, a student inside its teacher, a tag its teacher never saw).

One tiny world is made once (a vocabulary, a config, MRPC-format data, a fine-tuned classifier,
the teacher, and its export with --tflite). The damaged exports are all loaded by one process
(through the script runner's server), which reports each case; the scripts' cases run two at a
time.
"""
import concurrent.futures
import json
import logging
import os
import re
import shutil

import pytest

from support import faults
from support.paths import REPO
from support.script_runner import run_script

WORDS, VOCAB = faults.RUN_WORDS, faults.RUN_VOCAB
CONFIG = dict(faults.RUN_CONFIG, num_hidden_layers=1)


def classifier_flags(w, output_dir, *extra, vocab=None):
  return ["--task_name=MRPC", f"--data_dir={w['mrpc']}", f"--vocab_file={vocab or w['vocab']}",
          f"--bert_config_file={w['config']}", "--max_seq_length=32", "--train_batch_size=4",
          "--num_train_epochs=1", f"--output_dir={output_dir}", *extra]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
  root = tmp_path_factory.mktemp("faults_files")
  w = faults.make_world(root, VOCAB, CONFIG, WORDS, mrpc_rows=8)
  w["teacher"] = str(root / "teacher")
  faults.run_all([("run_classifier.py", classifier_flags(w, w["teacher"], "--do_train")),
                  ("export_savedmodel.py", [
                      "--task=classifier", "--task_name=MRPC", f"--vocab_file={w['vocab']}",
                      f"--bert_config_file={w['config']}", f"--init_checkpoint={w['teacher']}",
                      f"--export_dir={root / 'export'}", "--max_seq_length=32", "--tflite"])],
                 parallel=1)
  w["version"] = str(next((root / "export").iterdir()))
  return w


# ------------------------------------------------------------------------------------------------
# Exports: every case loaded by one process, which must not die of a signal.

# name: (file of the version, damage, backend, checksums kept (an export of before them: no), the
# outcome: "served <backend>" with a warning matching the pattern, or "error" whose message does).
EXPORT_CASES = {
    "tflite_zero_bytes": ("assets.extra/model.tflite", ("cut", 0), "auto", False,
                          ("served savedmodel", r"model\.tflite: 0 bytes, too short")),
    "tflite_cut_after_8_bytes": ("assets.extra/model.tflite", ("cut", 8), "auto", False,
                                 ("served savedmodel", r"model\.tflite: cut short or damaged")),
    "tflite_cut_in_half": ("assets.extra/model.tflite", ("cut", 0.5), "auto", False,
                           ("served savedmodel", r"model\.tflite: cut short or damaged")),
    "tflite_without_its_last_byte": ("assets.extra/model.tflite", ("cut", -1), "auto", False,
                                     ("served savedmodel", r"model\.tflite: cut short")),
    "tflite_flipped_first_byte": ("assets.extra/model.tflite", ("flip", 0), "tflite", False,
                                  ("error", r"model\.tflite: cut short or damaged .*: export "
                                            r"again with --tflite, or load it with "
                                            r"backend='savedmodel'")),
    "tflite_flipped_mark": ("assets.extra/model.tflite", ("flip", 5), "tflite", False,
                            ("error", r"model\.tflite: no TFL3 mark at byte 4")),
    "tflite_cut_checked_by_its_checksum": ("assets.extra/model.tflite", ("cut", 0.9), "auto",
                                           True, ("served savedmodel",
                                                  r"model\.tflite is [\d,]+ bytes, not the "
                                                  r"[\d,]+ it was written with")),
    "tflite_vocab_cut": ("assets.extra/vocab.txt", ("cut", 0.5), "tflite", True,
                         ("error", r"assets\.extra/vocab\.txt is [\d,]+ bytes, not the")),
    "graph_flipped_byte": ("saved_model.pb", ("flip", 1000), "auto", True,
                           ("error", r"a damaged export version \(saved_model\.pb differs from "
                                     r"what was written \(its sha256\)")),
    "graph_of_before_checksums_cut": ("saved_model.pb", ("cut", 0.5), "auto", False,
                                      ("error", r"cannot be loaded .*: a damaged export version")),
    "variables_of_before_checksums_cut": (
        "variables/variables.data-00000-of-00001", ("cut", 0.5), "auto", False,
        ("error", r"variables/variables: \.data-00000-of-00001 is cut short \([\d,]+ of [\d,]+ "
                  r"bytes\)")),
    "checksums_file_garbled": ("assets.extra/checksums.json", ("flip", 0), "auto", True,
                               ("error", r"checksums\.json cannot be read: damaged")),
    # The newest version damaged, a whole one before it: that one is served.
    "newest_version_variables_cut": ("variables/variables.data-00000-of-00001", ("cut", 0.5),
                                     "savedmodel", True,
                                     ("served savedmodel", r"a damaged export version .*: "
                                                           r"skipped; serving .*/1, the newest")),
}

_LOADER = r"""
import json, logging, os, shutil, sys, traceback
sys.path.insert(0, {repo!r})  # this worktree's bert_tf, in a fresh interpreter too
from bert_tf.errors import BertTfError
from bert_tf.serving import predictor, tflite
from bert_tf.serving import export
from bert_tf.model.config import BertConfig
cases, (version, root, quantized_config) = json.loads(sys.argv[1]), sys.argv[2:5]
warnings = []
class Catch(logging.Handler):
  def emit(self, record):
    warnings.append(record.getMessage())
logging.getLogger().addHandler(Catch(logging.WARNING))

def damage(path, how):
  # ("cut", a fraction of its bytes, or that many bytes, or a negative number fewer) or
  # ("flip", a byte's offset)
  data = bytearray(open(path, "rb").read())
  kind, at = how
  if kind == "cut":
    keep = int(len(data) * at) if isinstance(at, float) else at if at >= 0 else len(data) + at
    data = data[:keep]
  else:
    data[at] ^= 0xFF
  open(path, "wb").write(bytes(data))

def report(name, **found):
  print(json.dumps(dict(name=name, **found)), flush=True)

for name, (file, how, backend, checksums) in cases.items():
  case = os.path.join(root, name)
  target = os.path.join(case, "2" if name.startswith("newest_") else "1")
  if name.startswith("newest_"):
    shutil.copytree(version, os.path.join(case, "1"))
  shutil.copytree(version, target)
  if not checksums:
    os.remove(os.path.join(target, "assets.extra", "checksums.json"))
  damage(os.path.join(target, file), how)
  del warnings[:]
  try:
    served = predictor.load(case, backend=backend, batch_size=2)
    label = served(["the dog is hairy ."])[0]["label"]
    report(name, outcome="served " + served.backend, label=label, warnings=list(warnings))
  except BertTfError as e:
    report(name, outcome="error", message=str(e))
  except Exception:
    report(name, outcome="traceback", message=traceback.format_exc())

# A quantized model (dynamic-range int8 weights) cut and flipped, read by TensorFlow Lite's runner.
model = export.build_model("classifier", BertConfig.from_json_file(quantized_config), num_labels=2)
blob = tflite.convert(model, ["logits"], quantize="dynamic")
for name, how in (("quantized_cut_in_half", ("cut", 0.5)),
                  ("quantized_flipped_fourth_byte", ("flip", 3))):
  path = os.path.join(root, name + ".tflite")
  open(path, "wb").write(blob)
  damage(path, how)
  try:
    tflite.Runner(path=path)
    report(name, outcome="read")
  except BertTfError as e:
    report(name, outcome="error", message=str(e))
details = tflite.Runner(blob).interpreter.get_tensor_details()
report("quantized_whole", int8=any(d["dtype"].__name__ == "int8" for d in details))
"""
QUANTIZED_CASES = {"quantized_cut_in_half": r"\.tflite: cut short or damaged",
                   "quantized_flipped_fourth_byte": r"\.tflite: cut short or damaged"}


@pytest.fixture(scope="module")
def loaded(world):
  """Every export case loaded by one process: name -> what it reported."""
  script = world["root"] / "loader.py"
  script.write_text(_LOADER.replace("{repo!r}", repr(REPO)))
  cases = {name: case[:4] for name, case in EXPORT_CASES.items()}
  quantized_config = faults.write_json(world["root"] / "quantized_config.json",
                                       dict(CONFIG, hidden_size=64, intermediate_size=128))
  (world["root"] / "exports").mkdir()
  done = run_script(str(script), json.dumps(cases), world["version"],
                    str(world["root"] / "exports"), quantized_config, timeout=600)
  # Never a signal (a negative status): what it reported until then says where.
  assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
  return {found["name"]: found for found in map(json.loads, done.stdout.splitlines())}


@pytest.mark.parametrize("name", list(EXPORT_CASES))
def test_a_damaged_export_file_is_skipped_or_named(loaded, name):
  found = loaded[name]
  outcome, pattern = EXPORT_CASES[name][4]
  assert found["outcome"] == outcome, found
  if outcome == "error":
    assert re.search(pattern, found["message"]), found["message"]
    assert "\n" not in found["message"]
  else:
    assert found["label"] in ("0", "1")
    assert len([m for m in found["warnings"] if re.search(pattern, m)]) == 1, found["warnings"]


@pytest.mark.parametrize("name", list(QUANTIZED_CASES))
def test_a_damaged_quantized_model_is_named_before_tensorflow_lite_reads_it(loaded, name):
  assert loaded["quantized_whole"]["int8"], loaded["quantized_whole"]  # quantized indeed
  assert loaded[name]["outcome"] == "error", loaded[name]
  assert re.search(QUANTIZED_CASES[name], loaded[name]["message"]), loaded[name]


# ------------------------------------------------------------------------------------------------
# Caches of another shape, or that do not parse: measured again, one warning.


def _warnings(caplog):
  return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("cached", ["another_shape", "not_json", "an_entry_of_a_list",
                                    "a_foreign_time"])
def test_a_dtype_probe_cache_of_another_shape_is_measured_again(tmp_path, monkeypatch, caplog,
                                                               cached):
  from bert_tf.training import machine  # pylint: disable=g-import-not-at-top
  from bert_tf.model.config import BertConfig  # pylint: disable=g-import-not-at-top
  from bert_tf.training import dtype_probe  # pylint: disable=g-import-not-at-top
  monkeypatch.setenv("BERT_TF_CACHE_DIR", str(tmp_path))
  measured = []
  monkeypatch.setattr(dtype_probe, "measure",
                      lambda config, seq: measured.append(seq) or (0.2, 0.1))
  config = BertConfig.from_dict(CONFIG)
  key = machine.Choices._key(  # pylint: disable=protected-access
      dtype_probe.cache_key(config, 32, "", None))
  path = tmp_path / "dtype_probe.json"
  path.write_bytes({
      "another_shape": json.dumps({key: {"value": [0.2, 0.1], "time": 1}}).encode(),
      "not_json": b"\x00\xff{{ not json",
      "an_entry_of_a_list": json.dumps([1, 2]).encode(),
      "a_foreign_time": json.dumps({key: {"value": {"float32": "fast"}, "time": "x"},
                                    "other": {"time": "y"}}).encode()}[cached])
  with caplog.at_level(logging.WARNING):
    assert dtype_probe.timings(config, 32, "") == (0.2, 0.1, False)
    assert dtype_probe.timings(config, 32, "") == (0.2, 0.1, True)  # kept anew
  assert measured == [32]
  warned = _warnings(caplog)
  assert len(warned) == 1 and warned[0].startswith(f"{path}: ") and "measured again" in warned[0]


@pytest.mark.parametrize("kept", ["seconds_a_list", "a_size_missing", "a_backend_unknown",
                                  "not_json"])
def test_a_backend_cache_of_another_shape_is_timed_again(world, tmp_path, monkeypatch, caplog,
                                                         kept):
  from bert_tf.training import machine  # pylint: disable=g-import-not-at-top
  from bert_tf.serving import backends  # pylint: disable=g-import-not-at-top
  version, timed = world["version"], []
  seconds = {"savedmodel": {1: 0.03, 2: 0.05}, "tflite": {1: 0.02, 2: 0.04}}
  monkeypatch.setattr(backends, "measure", lambda loaded, size: timed.append(size) or seconds)
  choices = machine.Choices("backends", directory=str(tmp_path))
  key = choices._key(backends.measure_key(version, 2))  # pylint: disable=protected-access
  values = {"seconds_a_list": {"backend": "tflite", "seconds": [0.1, 0.2]},
            "a_size_missing": {"backend": "tflite", "seconds": {"tflite": {"1": 0.1},
                                                                "savedmodel": {"1": 0.2}}},
            "a_backend_unknown": {"backend": "onnx", "seconds": {}}}
  (tmp_path / "backends.json").write_bytes(b"\x89PNG garbage" if kept == "not_json" else
                                           json.dumps({key: {"value": values[kept],
                                                             "time": 1}}).encode())
  with caplog.at_level(logging.WARNING):
    chosen = backends.pick(version, "auto", 2, lambda name, dtype: name, choices=choices)
    again = backends.pick(version, "auto", 2, lambda name, dtype: name,
                          choices=machine.Choices("backends", directory=str(tmp_path)))
  assert chosen == again == "tflite" and timed == [2]
  warned = _warnings(caplog)
  assert len(warned) == 1 and "backends.json: " in warned[0] and "measured again" in warned[0]


# ------------------------------------------------------------------------------------------------
# Scripts: damaged run files, a SQuAD file of wrong types, distillation's inputs.


def _copy_of_teacher(w, case_dir, damage=None):
  teacher = case_dir / "teacher"
  shutil.copytree(w["teacher"], teacher)
  for name, text in (damage or {}).items():
    (teacher / name).parent.mkdir(parents=True, exist_ok=True)
    (teacher / name).write_text(text)
  return teacher


def _student(w, d, teacher, *extra, output_dir=None, vocab=None):
  return classifier_flags(w, output_dir or d / "student", "--do_train", f"--teacher_dir={teacher}",
                          *extra, vocab=vocab)


def _squad(w, d, answer_start):
  (d / "train.json").write_text(json.dumps({"data": [{"paragraphs": [{
      "context": "the dog is hairy .",
      "qas": [{"id": "q1", "question": "is the dog hairy ?",
               "answers": [{"text": "hairy", "answer_start": 11}]},
              {"id": "q2", "question": "what is the dog ?",
               "answers": [{"text": "hairy", "answer_start": answer_start}]}]}]}]}))
  return [f"--train_file={d / 'train.json'}", f"--vocab_file={w['vocab']}",
          f"--bert_config_file={w['config']}", "--do_train", f"--output_dir={d}/o",
          "--max_seq_length=32", "--max_query_length=8", "--doc_stride=8"]


def _ner_teacher(d):
  """A NER run's directory as far as a student's checks read it: its task_config.json."""
  teacher = d / "ner_teacher"
  teacher.mkdir(parents=True)
  (teacher / "task_config.json").write_text(json.dumps({
      "task": "ner", "label_list": ["O", "B-PER", "I-PER"], "feature_based": False,
      "do_lower_case": True, "max_seq_length": 32}))
  (d / "data").mkdir()
  (d / "data" / "train.txt").write_text("the O\ndog B-PER\nsat B-LOC\n\nthe O\n")
  return teacher


# Each case: script, flags (a function of the world and the case directory), the pattern of the
# one error line, and what must be as it was afterwards (a path, or None).
CASES = {
    "teacher_task_config_not_json": ("run_classifier.py", lambda w, d: _student(
        w, d, _copy_of_teacher(w, d, {"task_config.json": "{nope"})),
        r"--teacher_dir: .*/teacher/task_config\.json: not valid JSON", None),
    "teacher_task_config_a_list": ("run_classifier.py", lambda w, d: _student(
        w, d, _copy_of_teacher(w, d, {"task_config.json": "[1, 2]"})),
        r"--teacher_dir: .*/teacher/task_config\.json: a JSON list, not the object", None),
    "teacher_bert_config_not_json": ("run_classifier.py", lambda w, d: _student(
        w, d, _copy_of_teacher(w, d, {"bert_config.json": '{"vocab_size": '})),
        r".*/teacher/bert_config\.json: not valid JSON", None),
    "teacher_best_json_damaged": ("run_classifier.py", lambda w, d: _student(
        w, d, _copy_of_teacher(w, d, {"best/best.json": "\x00"})),
        r"--teacher_dir: .*/teacher/best/best\.json: not valid JSON", None),
    "own_best_json_damaged": ("run_classifier.py", lambda w, d: classifier_flags(
        w, _copy_of_teacher(w, d, {"best/best.json": "[]"}), "--do_eval",
        "--keep_best_metric=eval_accuracy"),
        r"--output_dir: .*/best/best\.json is damaged \(not the JSON object keep-best writes\)",
        lambda w, d: d / "teacher"),
    "squad_answer_start_a_string": ("run_squad.py", lambda w, d: _squad(w, d, "11"),
                                    r"train\.json: question 'q2': answer_start should be an "
                                    r"integer .*, is str '11'", None),
    "squad_answer_start_a_float": ("run_squad.py", lambda w, d: _squad(w, d, 11.0),
                                   r"train\.json: question 'q2': answer_start should be an "
                                   r"integer .*, is float 11\.0", None),
    "distill_temperature_inf": ("run_classifier.py", lambda w, d: _student(
        w, d, w["teacher"], "--distill_temperature=inf"),
        r"--distill_temperature: expected a finite number above 0, got inf", None),
    "student_output_dir_is_its_teacher": ("run_classifier.py", lambda w, d: _student(
        w, d, _copy_of_teacher(w, d), output_dir=d / "teacher"),
        r"--output_dir: .*/teacher is --teacher_dir .*: the student would write into its "
        r"teacher's run", lambda w, d: d / "teacher"),
    "student_output_dir_inside_its_teacher_through_a_link": ("run_classifier.py", lambda w, d: (
        _copy_of_teacher(w, d), os.symlink(d / "teacher", d / "link"),
        _student(w, d, d / "link", output_dir=d / "teacher" / "student"))[-1],
        r"--output_dir: .*/teacher/student is inside --teacher_dir .*/link",
        lambda w, d: d / "teacher"),
    "ner_tag_outside_its_teachers_labels": ("run_ner.py", lambda w, d: [
        f"--data_dir={d / 'data'}", f"--vocab_file={w['vocab']}",
        f"--bert_config_file={w['config']}", "--do_train", f"--output_dir={d}/o",
        "--max_seq_length=32", f"--teacher_dir={_ner_teacher(d)}"],
        r"data/train\.txt:3: tag 'B-LOC' is not one of the teacher's \(.*ner_teacher\) labels "
        r"\(O, B-PER, I-PER\)", None),
}


def files_of(path):
  if path is None or not os.path.exists(path):
    return None
  return {os.path.relpath(os.path.join(d, n), path): open(os.path.join(d, n), "rb").read()
          for d, _, names in os.walk(path) for n in names}


def _crlf_then_resumed(w):
  """A student with the teacher's vocabulary in CRLF line ends and the teacher through a symlink,
  saving steps 1 and 2; then, its cached soft targets and its newest checkpoint's .data file cut
  short (a power loss), resumed with the teacher by its real path."""
  d = w["root"] / "cases" / "crlf"
  d.mkdir(parents=True)
  crlf = d / "vocab_crlf.txt"
  crlf.write_bytes(open(w["vocab"], "rb").read().replace(b"\n", b"\r\n"))
  os.symlink(w["teacher"], d / "teacher_link")
  first = run_script("run_classifier.py", *_student(w, d, d / "teacher_link",
                                                    "--save_checkpoints_steps=1", vocab=crlf),
                     timeout=300)
  student = d / "student"
  for name in ("teacher_logits.npz", "model.ckpt-2.data-00000-of-00001"):
    if (student / name).exists():
      (student / name).write_bytes((student / name).read_bytes()[:100])
  second = run_script("run_classifier.py", *_student(w, d, w["teacher"], "--save_checkpoints_steps=1",
                                                     vocab=crlf), "--num_train_epochs=2",
                      timeout=300)
  return first, second, sorted(os.listdir(student))


@pytest.fixture(scope="module")
def outcomes(world):
  def one(name):
    if name == "crlf":
      return name, _crlf_then_resumed(world)
    script, make_flags, _, watched = CASES[name]
    case_dir = world["root"] / "cases" / name
    case_dir.mkdir(parents=True)
    args = [str(a) for a in make_flags(world, case_dir)]
    path = watched(world, case_dir) if watched else None
    before = files_of(path)
    done = run_script(script, *args, timeout=300)
    return name, (done, before, files_of(path))

  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    return dict(pool.map(one, ["crlf"] + list(CASES)))


@pytest.mark.parametrize("name", list(CASES))
def test_a_damaged_file_or_a_bad_input_is_one_line(outcomes, name):
  done, before, after = outcomes[name]
  assert "Traceback" not in done.stderr, done.stderr[-3000:]
  assert done.returncode == 1, done.stderr[-3000:]
  last = done.stderr.strip().splitlines()[-1]
  assert last.startswith("error: ") and re.search(CASES[name][2], last), last
  assert after == before  # nothing written into (or changed in) what the case watches


def test_a_crlf_vocabulary_and_a_teacher_through_a_symlink_are_the_teachers(outcomes):
  """And a distilled run resumed after a power loss: its cut soft targets predicted again, its cut
  newest checkpoint set aside, the one before resumed."""
  first, second, files = outcomes["crlf"]
  assert first.returncode == 0, first.stderr[-3000:]
  assert second.returncode == 0, second.stderr[-3000:]
  assert re.search(r"Resuming from .*/student/model\.ckpt-1\n", second.stderr), second.stderr
  lines = second.stderr.splitlines()
  damaged = [line for line in lines if "soft targets are damaged" in line]
  assert len(damaged) == 1 and "predicted again" in damaged[0], second.stderr[-3000:]
  cut = [line for line in lines if "model.ckpt-2 is damaged (.data-00000-of-00001 is cut" in line]
  assert len(cut) == 1, second.stderr[-3000:]
  assert {"model.ckpt-2.damaged-1.index", "model.ckpt-2.damaged-1.data-00000-of-00001",
          "model.ckpt-4.index"} <= set(files)

