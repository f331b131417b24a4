"""The predictor's two backends on real text: the SavedModel against TensorFlow Lite, per task.

For each export given (each made with --tflite), bert_tf.serving.predictor.load(export, backend=...)
with both backends answers the task's real data, and the table says:
  - how many results are the same: a classifier's labels, SQuAD's answers (with the no-answer
    decision), NER's (word, tag) pairs; the largest score difference;
  - a classifier's dev accuracy through each backend;
  - the time of loading plus a first call on two inputs, and of the whole data after it (median
    of --rounds, the two backends taking turns; batch_size --batch_size).

  flock /tmp/bert_tf_heavy.lock .venv/bin/python bench/bench_predictor_backends.py \
      --classifier_export=<export_savedmodel.py --tflite of an MRPC model>

The SQuAD and NER exports default to those bench_cpu_inference.py prepares (MiniLM's encoder with
untrained heads; run it first); the data: GLUE MRPC dev, the SQuAD 2.0 dev subset, the first
--ner_sentences sentences of CoNLL-2003 test, all under ../shared/data.
"""
import os
import sys
import time

from lib import bench_env  # noqa: F401  (first: the environment every bench runs in)
from lib.bench_env import DATA
from absl import flags

from lib import harness

PREPARED = os.path.join("/tmp", "bert_tf_cpu_inference", "minilm_seq128")
FLAGS = flags.FlagValues()
flags.DEFINE_string("classifier_export", None, "A GLUE pair classifier's export (--tflite); none: "
                    "skip.", flag_values=FLAGS)
flags.DEFINE_string("classifier_data_dir", os.path.join(DATA, "glue", "MRPC"), "Its GLUE "
                    "directory.", flag_values=FLAGS)
flags.DEFINE_string("squad_export", os.path.join(PREPARED, "export_squad"), "A SQuAD export "
                    "(--tflite).", flag_values=FLAGS)
flags.DEFINE_string("ner_export", os.path.join(PREPARED, "export_ner"), "An NER export (--tflite).",
                    flag_values=FLAGS)
flags.DEFINE_integer("ner_sentences", 1000, "CoNLL-2003 test sentences to tag.", flag_values=FLAGS)
flags.DEFINE_integer("batch_size", 32, "The predictor's batch_size.", flag_values=FLAGS)
flags.DEFINE_integer("rounds", 3, "Timed calls on the whole data per backend, taking turns.",
                     flag_values=FLAGS)
flags.DEFINE_boolean("append", True, "Append the table to benchmarks/<date>.md.", flag_values=FLAGS)

BACKENDS = ("savedmodel", "tflite")


def classifier_data():
  """(the predictor call's keyword arguments, gold labels) of the GLUE dev set."""
  from bert_tf.tasks import glue  # pylint: disable=g-import-not-at-top
  name = os.path.basename(os.path.normpath(FLAGS.classifier_data_dir)).lower()
  examples = glue.get_processor(name).get_dev_examples(FLAGS.classifier_data_dir)
  return {"texts": [(e.text_a, e.text_b) for e in examples]}, [e.label for e in examples]


def squad_data():
  import json  # pylint: disable=g-import-not-at-top
  with open(os.path.join(DATA, "squad", "dev-v2.0.subset.json"), encoding="utf-8") as f:
    articles = json.load(f)["data"]
  pairs = [(qa["question"], paragraph["context"]) for article in articles
           for paragraph in article["paragraphs"] for qa in paragraph["qas"]]
  return {"question": [q for q, _ in pairs], "context": [c for _, c in pairs]}, None


def ner_data():
  from bert_tf.tasks import conll  # pylint: disable=g-import-not-at-top
  sentences = conll.read_conll(os.path.join(DATA, "conll2003", "test.txt"))
  return {"texts": [" ".join(s.words) for s in sentences[:FLAGS.ner_sentences]]}, None


def compare(task, results, gold):
  """(what is compared, how many of them are the same, largest score difference, accuracy per
  backend or None) of the two backends' results."""
  a, b = (results[name] for name in BACKENDS)
  if task == "ner":
    pairs = [(x, y) for sa, sb in zip(a, b) for x, y in zip(sa, sb)]
    return "(word, tag) pairs", sum(x == y for x, y in pairs), len(pairs), 0.0, None
  if task == "squad":
    same = sum(x["answer"] == y["answer"] and x["has_answer"] == y["has_answer"]
               for x, y in zip(a, b))
    diff = max(max(abs(x["score"] - y["score"]), abs(x["null_score_diff"] - y["null_score_diff"]))
               for x, y in zip(a, b))
    return "answers", same, len(a), diff, None
  diff = max(abs(x["scores"][k] - y["scores"][k]) for x, y in zip(a, b) for k in x["scores"])
  accuracy = {name: sum(r["label"] == g for r, g in zip(results[name], gold)) / len(gold)
              for name in BACKENDS}
  return "labels", sum(x["label"] == y["label"] for x, y in zip(a, b)), len(a), diff, accuracy


def run_task(task, export_dir, data):
  """The table row of one task: both backends loaded, first-called, then timed in turns."""
  from bert_tf.serving import predictor  # pylint: disable=g-import-not-at-top
  kwargs, gold = data()
  first_input = {k: v[:2] for k, v in kwargs.items()}
  loaded, first = {}, {}
  for name in BACKENDS:
    start = time.perf_counter()
    loaded[name] = predictor.load(export_dir, backend=name, batch_size=FLAGS.batch_size)
    assert loaded[name].backend == name, f"{export_dir}: not made with --tflite"
    loaded[name](**first_input)
    first[name] = time.perf_counter() - start
  seconds = {name: [] for name in BACKENDS}
  results = {}
  for _ in range(FLAGS.rounds):
    for name in BACKENDS:
      start = time.perf_counter()
      results[name] = loaded[name](**kwargs)
      seconds[name].append(time.perf_counter() - start)
  what, same, count, diff, accuracy = compare(task, results, gold)
  median = {name: harness.summary(s)[0] for name, s in seconds.items()}
  accuracy = " / ".join(f"{accuracy[n]:.4f}" for n in BACKENDS) if accuracy else ""
  return (f"| {task} | {len(results['tflite'])} | {same} of {count} {what} | {diff:.1e} | "
          f"{accuracy} | {first['savedmodel']:.1f} / {first['tflite']:.1f} | "
          f"{median['savedmodel']:.2f} / {median['tflite']:.2f} | "
          f"**{median['savedmodel'] / median['tflite']:.2f}x** |")


def main(argv):
  del argv
  exports = {"classifier": (FLAGS.classifier_export, classifier_data),
             "squad": (FLAGS.squad_export, squad_data), "ner": (FLAGS.ner_export, ner_data)}
  lines = [f"\n## The predictor's backends on real text (bench/bench_predictor_backends.py), "
           f"{harness.utc_now()}\n",
           "Command: `flock /tmp/bert_tf_heavy.lock .venv/bin/python "
           "bench/bench_predictor_backends.py" + "".join(f" {a}" for a in sys.argv[1:]) + "`  ",
           f"Commit {harness.commit(note_dirty=True)}. {harness.machine_line()}.  ",
           f"Exports: {', '.join(f'{t} {d}' for t, (d, _) in exports.items() if d)}; batch_size "
           f"{FLAGS.batch_size}; times: loading + a first call on two inputs, then the whole data "
           f"(median of {FLAGS.rounds}, the backends taking turns). savedmodel / tflite.\n",
           "| task | inputs | the same through both | max score diff | accuracy | first s | "
           "whole data s | speed-up |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
  lines += [run_task(task, directory, data) for task, (directory, data) in exports.items()
            if directory]
  harness.publish(lines, FLAGS.append)


if __name__ == "__main__":
  harness.run(main, FLAGS, __doc__)
