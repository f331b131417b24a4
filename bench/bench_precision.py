"""Reduced precision on real tasks: fine-tuned MiniLM models in float32, bfloat16 and int8, as the
export's accuracy check scores them (bert_tf.serving.guard), with the predictions that differ.

For each run_*.py output_dir given, export_savedmodel.py runs as a user runs it, with --tflite
--dtype=bfloat16 --quantize=int8, then again with --quantize=dynamic, both with
--max_quantization_loss=100 (every path is recorded, and none refused: the table says which the
default 0.5 would refuse). The table reads each version's assets.extra/quantization.json: per
task and path (savedmodel/bfloat16, tflite/int8 calibrated or dynamic, openvino/bfloat16,
openvino/int8), the keep-best metric against float32's, the points lost, the rows whose results
differ and the first of them. Check rows: MRPC and SST-2 dev, CoNLL-2003 valid, and for SQuAD
the shared SQuAD 2.0 subset (dev-v2.0.subset.json; the model was trained on
bench/make_synthetic_squad.py's set, whose dev questions are checked too with --squad_dev).

--ops_study: which ops --quantize=int8 computes in int8, measured. The MRPC model converted with
each group of ops in int8 beside the dense layers' matmuls (the attention's batched matmuls,
softmax, the layer norms' mean and variance, GELU, the embeddings' lookup, every op), each scored
on MRPC dev against float32 and timed at batch 8, seq 128 (TensorFlow Lite, 2 threads, CPU
time, the variants taking turns).

  flock /tmp/bert_tf_heavy.lock .venv/bin/python bench/bench_precision.py --mrpc_dir=out/mrpc \
      --sst2_dir=out/sst2 --sst2_data_dir=out/sst2_data --ner_dir=out/ner \
      --ner_data_dir=out/conll --squad_dir=out/squad --squad_train_file=out/squad/train.json
"""
import json
import os
import subprocess
import sys
import time

from lib import bench_env  # noqa: F401  (first: the environment every bench runs in)
from lib.bench_env import DATA
from lib.bench_env import REPO
from absl import flags

from lib import harness

FLAGS = flags.FlagValues()
flags.DEFINE_string("mrpc_dir", None, "run_classifier.py's MRPC output_dir.", flag_values=FLAGS)
flags.DEFINE_string("sst2_dir", None, "run_classifier.py's SST-2 output_dir.", flag_values=FLAGS)
flags.DEFINE_string("sst2_data_dir", os.path.join(DATA, "glue", "SST-2"), "Its data (train.tsv "
                    "calibrates, dev.tsv checks).", flag_values=FLAGS)
flags.DEFINE_string("ner_dir", None, "run_ner.py's output_dir.", flag_values=FLAGS)
flags.DEFINE_string("ner_data_dir", os.path.join(DATA, "conll2003"), "Its CoNLL-2003 data.",
                    flag_values=FLAGS)
flags.DEFINE_string("squad_dir", None, "run_squad.py's output_dir (seq 256, SQuAD 2.0).",
                    flag_values=FLAGS)
flags.DEFINE_string("squad_train_file", None, "Its training file (calibrates int8).",
                    flag_values=FLAGS)
flags.DEFINE_string("squad_dev", None, "Another SQuAD file to check the SQuAD model on too.",
                    flag_values=FLAGS)
flags.DEFINE_integer("squad_seq_length", 256, "The SQuAD model's max_seq_length.",
                     flag_values=FLAGS)
flags.DEFINE_list("quantize", "int8,dynamic", "The --quantize of each export.",
                  flag_values=FLAGS)
flags.DEFINE_boolean("ops_study", False, "Also the study of which ops int8 computes (MRPC).",
                     flag_values=FLAGS)
flags.DEFINE_integer("study_rounds", 5, "Timed rounds of the ops study.", flag_values=FLAGS)
flags.DEFINE_string("work_dir", "/tmp/bert_tf_precision", "Where the exports go.",
                    flag_values=FLAGS)
flags.DEFINE_boolean("append", True, "Append the results to benchmarks/<date>.md.",
                     flag_values=FLAGS)

SQUAD_SUBSET = os.path.join(DATA, "squad", "dev-v2.0.subset.json")


def exports():
  """[(name, output_dir, export_savedmodel.py's task flags)] of the models given."""
  found = []
  if FLAGS.mrpc_dir:
    found.append(("MRPC", FLAGS.mrpc_dir, ["--task=glue", "--task_name=MRPC",
                                           f"--data_dir={os.path.join(DATA, 'glue', 'MRPC')}"]))
  if FLAGS.sst2_dir:
    found.append(("SST-2", FLAGS.sst2_dir, ["--task=glue", "--task_name=SST-2",
                                            f"--data_dir={FLAGS.sst2_data_dir}"]))
  if FLAGS.ner_dir:
    found.append(("CoNLL-2003", FLAGS.ner_dir, ["--task=ner", f"--data_dir={FLAGS.ner_data_dir}"]))
  if FLAGS.squad_dir:
    squad = ["--task=squad", "--version_2_with_negative", f"--train_file={FLAGS.squad_train_file}",
             f"--max_seq_length={FLAGS.squad_seq_length}"]
    found.append(("SQuAD 2.0 subset", FLAGS.squad_dir,
                  squad + [f"--quantization_check_file={SQUAD_SUBSET}"]))
    if FLAGS.squad_dev:
      found.append(("SQuAD synthetic dev", FLAGS.squad_dir,
                    squad + [f"--quantization_check_file={FLAGS.squad_dev}"]))
  return found


def export_command(output_dir, task_flags, quantize, export_dir):
  model = [f"--bert_config_file={os.path.join(output_dir, 'bert_config.json')}",
           f"--vocab_file={os.path.join(output_dir, 'vocab.txt')}", f"--init_checkpoint={output_dir}"]
  dtype = ["--dtype=bfloat16"] if quantize == "int8" else []  # bfloat16 checked once
  return ["export_savedmodel.py", *model, *task_flags, f"--export_dir={export_dir}", "--tflite",
          f"--quantize={quantize}", *dtype, "--max_quantization_loss=100"]


def run_export(command):
  """(the version's quantization.json, the seconds the whole command took)."""
  start = time.perf_counter()
  done = subprocess.run([sys.executable, *command], cwd=REPO, capture_output=True, text=True,
                        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"), check=False)
  took = time.perf_counter() - start
  if done.returncode:
    raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
  export_dir = next(a.split("=", 1)[1] for a in command if a.startswith("--export_dir="))
  version = os.path.join(export_dir, max(os.listdir(export_dir), key=int))
  with open(os.path.join(version, "assets.extra", "quantization.json"), encoding="utf-8") as f:
    return json.load(f), took


def rows_of(name, doc, quantize):
  """The table rows of one export's quantization.json."""
  metric, scale = doc["metric"], doc["points_per_unit"]
  rows = []
  if quantize == "int8":
    rows.append(f"| {name} | float32 | {metric} {scale * doc['float32'][metric]:.2f} | | | |")
  for key, record in doc["paths"].items():
    if quantize != "int8" and key != "tflite/int8":  # the other paths: the int8 export's rows
      continue
    label = key + (f" ({quantize})" if key == "tflite/int8" else "")
    first = ", ".join(str(i) for i in record["differing_rows"][:8])
    refused = "" if record["loss"] <= 0.5 else " (refused at 0.5)"
    rows.append(f"| {name} | {label} | {scale * record['metrics'][metric]:.2f} | "
                f"{record['loss']:+.2f}{refused} | {record['differ']} of {doc['check']['rows']} | "
                f"{first} |")
  return rows


def accuracy_lines():
  lines = ["| task | path | keep-best metric | points lost | rows that differ | first such rows |",
           "|---|---|---:|---:|---:|---|"]
  commands = []
  for name, output_dir, task_flags in exports():
    for quantize in FLAGS.quantize:
      export_dir = os.path.join(FLAGS.work_dir, f"{name.replace(' ', '_')}_{quantize}")
      command = export_command(output_dir, task_flags, quantize, export_dir)
      doc, took = run_export(command)
      commands.append(f"- {name}, {took:.0f} s: `{' '.join(command)}` (check rows: "
                      f"{doc['check']['rows']} {doc['check']['what']} of {doc['check']['source']}"
                      f"; calibration: {doc.get('calibration')})")
      rows = rows_of(name, doc, quantize)
      lines += rows
      print("\n".join(rows), flush=True)
  return lines + ["", "The exports' commands:", ""] + commands


# --------------------------------------------------------------------------- the ops study


# Each variant: (name, the op types in int8 beside FULLY_CONNECTED).
OP_GROUPS = [("dense matmuls only (--quantize=int8)", ()),
             ("+ attention matmuls", ("BATCH_MATMUL",)), ("+ softmax", ("SOFTMAX",)),
             ("+ layer norm", ("MEAN", "SQUARED_DIFFERENCE", "RSQRT")), ("+ GELU", ("GELU",)),
             ("+ embeddings", ("GATHER",)), ("every op (full int8)", None)]


def ops_study_lines():
  import numpy as np  # pylint: disable=g-import-not-at-top
  from tensorflow.lite.python import schema_py_generated  # pylint: disable=g-import-not-at-top
  from bert_tf.model.config import BertConfig  # pylint: disable=g-import-not-at-top
  from bert_tf.serving import export  # pylint: disable=g-import-not-at-top
  from bert_tf.serving import guard  # pylint: disable=g-import-not-at-top
  from bert_tf.serving import predictor  # pylint: disable=g-import-not-at-top
  from bert_tf.serving import tflite  # pylint: disable=g-import-not-at-top
  from bert_tf.tasks import base  # pylint: disable=g-import-not-at-top
  task = base.get("glue")
  own = task.options_class(task_name="MRPC", data_dir=os.path.join(DATA, "glue", "MRPC"))
  d = FLAGS.mrpc_dir
  server = export.build_server(task, BertConfig.from_json_file(os.path.join(d, "bert_config.json")),
                               os.path.join(d, "vocab.txt"), True, d, 128,
                               **task.serving_options(own))
  reference_predictor = predictor.for_server(server)
  check = guard.check_set(task, own)
  reference = guard.reference(check, reference_predictor)
  _, inputs = guard.calibration_inputs(task, own, 200, 12345)
  calibration = guard.model_inputs(reference_predictor, inputs)
  every = tuple(name for name in dir(schema_py_generated.BuiltinOperator) if name.isupper())
  rng = np.random.RandomState(0)
  ids = rng.randint(1000, 30000, (8, 128)).astype(np.int32)
  runners, records = {}, {}
  for name, ops in OP_GROUPS:
    blob = tflite.convert(server.model, quantize="int8", calibration=calibration,
                          int8_ops=every if ops is None else tflite.INT8_OPS + ops)
    runners[name] = tflite.Runner(blob, num_threads=2)
    model = tflite.ServingModel(runners[name])
    candidate = export.make_server(task, server.tokenizer, model, 128, **task.serving_options(own))
    records[name] = guard.score(check, reference,
                                predictor.for_server(candidate, "tflite")(**check.inputs))
    print(name, records[name]["metrics"][check.metric], flush=True)
  calls = {name: (lambda r=r: r(ids, np.ones_like(ids), np.zeros_like(ids)))
           for name, r in runners.items()}
  for call in calls.values():
    call()
  seconds = {name: [] for name in calls}
  for _ in range(FLAGS.study_rounds):
    for name, call in calls.items():
      start = time.process_time()
      call()
      seconds[name].append(time.process_time() - start)
  metric = check.metric
  lines = [f"float32 {metric} {100 * reference['scores'][metric]:.2f} on {check.count} "
           f"{check.what}; calibration: 200 training pairs (seed 12345); CPU ms of a batch of 8 "
           f"x 128 ids, median of {FLAGS.study_rounds}, the variants taking turns.", "",
           f"| ops in int8 | {metric} | points lost | rows that differ | CPU ms / batch 8 |",
           "|---|---:|---:|---:|---:|"]
  for name, _ in OP_GROUPS:
    r = records[name]
    lines.append(f"| {name} | {100 * r['metrics'][metric]:.2f} | {r['loss']:+.2f} | "
                 f"{r['differ']} | {1000 * harness.summary(seconds[name])[0]:.1f} |")
  return lines


def main(argv):
  del argv
  lines = [f"\n## Reduced precision on real tasks (bench/bench_precision.py), "
           f"{harness.utc_now()}\n",
           "Command: `flock /tmp/bert_tf_heavy.lock .venv/bin/python bench/bench_precision.py" +
           "".join(f" {a}" for a in sys.argv[1:]) + "`  ",
           f"Commit {harness.commit(note_dirty=True)}. {harness.machine_line()}.  ",
           "Each export_savedmodel.py a whole process; points lost: float32's keep-best metric "
           "minus the path's (x100 where it is a fraction); rows counted from 0 in the check "
           "file.\n"]
  if exports():
    lines += accuracy_lines()
  if FLAGS.ops_study:
    lines += ["", "Which ops int8 computes (--ops_study, MRPC):", ""] + ops_study_lines()
  lines.append(f"\nLoad average at the end: {harness.load_average()}.")
  harness.publish(lines, FLAGS.append)


if __name__ == "__main__":
  harness.run(main, FLAGS, __doc__)
