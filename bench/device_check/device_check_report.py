"""bench/device_check/device_check.py's output: the log every line goes to, and the summary
tables (step 6), with the NVIDIA DeepLearningExamples row the pretraining figures compare with.
Standard library only."""
import datetime
import json
import os

from lib import bench_configs

# NVIDIA DeepLearningExamples, TensorFlow2/LanguageModeling/BERT/README.md, "Pre-training training
# performance: Single-node on NVIDIA DGX A100 (8x A100 80GB)", the 1-GPU, sequence-length-128
# row. It is BERT-Large ("All results are on BERT-Large model unless otherwise mentioned"), LAMB
# with gradient accumulation, the TensorFlow 21.02-py3 NGC container.
NVIDIA_ROW = dict(
    source="NVIDIA DeepLearningExamples TensorFlow2/LanguageModeling/BERT README, 'Pre-training "
           "training performance: Single-node on NVIDIA DGX A100 (8x A100 80GB)', row GPUs 1, "
           "sequence length 128",
    model="BERT-Large", gpu="A100 80GB", seq=128,
    mixed=485.59, mixed_batch=312, tf32=282.98, tf32_batch=176)
BERT_LARGE = bench_configs.full_config("large")
# Dense (no sparsity) tensor-core peaks, TFLOP/s: (bfloat16 / float16, TF32), from NVIDIA's
# data sheets; matched against the name nvidia-smi gives, most specific first.
PEAKS = (("H200", (989.4, 494.7)), ("H100 PCIe", (756.0, 378.0)), ("H100", (989.4, 494.7)),
         ("A100", (312.0, 156.0)), ("L40S", (362.1, 183.0)), ("L4", (121.0, 60.0)))


def train_flops_per_sequence(config, seq, preds):
  """3 x the forward matmul FLOPs of one sequence (backward ~ 2 x forward); the masked-LM head on
  the `preds` masked positions only (bench/bench_pretraining.py counts the same)."""
  h, i, t = config["hidden_size"], config["intermediate_size"], seq
  per_layer = 2 * t * (4 * h * h + 2 * h * i) + 2 * 2 * t * t * h
  forward = (config["num_hidden_layers"] * per_layer + 2 * h * h +
             2 * preds * (h * h + h * config["vocab_size"]))
  return 3 * forward


def peak_tflops(gpu_name):
  for key, peaks in PEAKS:
    if key.lower() in (gpu_name or "").lower():
      return peaks
  return None


class Output:
  """Prints every line and appends it to OUT_DIR/device_check.log."""

  def __init__(self, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    self.out_dir = out_dir
    self.log = open(os.path.join(out_dir, "device_check.log"), "w", encoding="utf-8")

  def line(self, text):
    print(text, flush=True)
    self.log.write(text + "\n")
    self.log.flush()

  def step(self, number, name, status, seconds, text):
    self.line(f"[{number} {name}] {status} ({seconds:.1f} s): {text}")

  def tail(self, name, rc, text, timeout, lines=25):
    what = f"timed out after {timeout:.0f} s" if rc in (124, 137) else f"exit status {rc}"
    self.line(f"  --- {name}: {what}; the end of its log:")
    for line in text.splitlines()[-lines:]:
      self.line(f"  | {line[:300]}")

  def close(self):
    self.log.close()


def pretraining_lines(runs, sizes, gpu_name):
  """The pretraining table, its speed-ups, and the NVIDIA row beside our best figures."""
  measured = [r for r in runs if r.get("sequences_per_s")]
  if not runs:
    return []
  lines = [f"## run_pretraining.py, {sizes['model']} seq {sizes['seq']}, batch "
           f"{sizes['batch']}, {sizes['steps']} steps (rate over the last {sizes['steps'] // 2})",
           "", "| dtype | XLA | packed | rows/s | sequences/s | real tokens/s | model TFLOP/s | "
           "loss | status |", "|---|---|---|---|---|---|---|---|---|"]
  for r in runs:
    lines.append(
        f"| {r['dtype']} | {'yes' if r['xla'] else 'no'} | {'yes' if r['packed'] else 'no'} | "
        f"{_num(r.get('rows_per_s'))} | {_num(r.get('sequences_per_s'))} | "
        f"{_num(r.get('real_tokens_per_s'))} | {_sig(r.get('tflops'))} | "
        f"{_num(r.get('loss'), 3)} | {r['status']} |")
  lines += [""] + speedup_lines(measured)
  lines += [""] + nvidia_lines(measured, sizes, gpu_name)
  return lines


def _num(value, digits=0):
  return "" if value is None else f"{value:,.{digits}f}"


def _sig(value):
  return "" if value is None else f"{value:.3g}"


def speedup_lines(measured):
  index = {(r["dtype"], r["xla"], r["packed"]): r["sequences_per_s"] for r in measured}
  lines = []
  base = index.get(("float32", False, False))
  for dtype in ("bfloat16", "float16"):
    if base and (dtype, False, False) in index:
      lines.append(f"- {dtype} / float32 (no XLA, unpacked): "
                   f"{index[(dtype, False, False)] / base:.2f}x")
  for (dtype, xla, packed), value in sorted(index.items()):
    if xla and (dtype, False, packed) in index:
      lines.append(f"- --use_xla / without, {dtype}{' packed' if packed else ''}: "
                   f"{value / index[(dtype, False, packed)]:.2f}x")
    if packed and (dtype, xla, False) in index:
      lines.append(f"- packed / unpacked sequences/s, {dtype}{' XLA' if xla else ''}: "
                   f"{value / index[(dtype, xla, False)]:.2f}x")
  return lines


def nvidia_lines(measured, sizes, gpu_name):
  row = NVIDIA_ROW
  large = train_flops_per_sequence(BERT_LARGE, row["seq"], 20)
  lines = [f"Compare with: {row['source']}: {row['model']} on one {row['gpu']}, "
           f"{row['mixed']} sequences/s mixed precision (batch {row['mixed_batch']}), "
           f"{row['tf32']} TF32 (batch {row['tf32_batch']}) = "
           f"{row['mixed'] * large / 1e12:.0f} and {row['tf32'] * large / 1e12:.0f} model TFLOP/s, "
           f"{row['mixed'] * large / 312e12:.0%} and {row['tf32'] * large / 156e12:.0%} of the "
           "A100's dense fp16 and TF32 peaks."]
  ours = train_flops_per_sequence(sizes["config"], sizes["seq"], sizes["preds"])
  lines.append(f"{row['model']} costs {large / ours:.1f}x the training FLOPs per sequence of "
               f"{sizes['model']} here: compare the fraction of the card's peak, not "
               "sequences/s.")
  peaks = peak_tflops(gpu_name)
  for kind, dtypes, column in (("mixed", ("bfloat16", "float16"), 0), ("TF32", ("float32",), 1)):
    best = max((r for r in measured if r["dtype"] in dtypes), default=None,
               key=lambda r: r["rows_per_s"])
    if best is None:
      continue
    tflops = best["rows_per_s"] * ours / 1e12
    share = f", {tflops / peaks[column]:.0%} of its peak" if peaks else ""
    lines.append(f"- ours, {kind} ({best['dtype']}{' XLA' if best['xla'] else ''}"
                 f"{' packed' if best['packed'] else ''}): {best['sequences_per_s']:,.0f} "
                 f"sequences/s on {gpu_name or 'this device'} = {tflops:.3g} model TFLOP/s"
                 f"{share}")
  return lines


def mrpc_lines(runs, cpu_accuracy):
  if not runs:
    return []
  reference = next((r["accuracy"] for r in runs
                    if r["dtype"] == "float32" and r.get("accuracy") is not None), None)
  lines = ["## run_classifier.py MRPC", "",
           "| dtype | dev accuracy | F1 | - CPU float32 | - this device's float32 | status |",
           "|---|---|---|---|---|---|"]
  for r in runs:
    acc = r.get("accuracy")
    lines.append(f"| {r['dtype']} | {_num(acc, 4)} | {_num(r.get('f1'), 4)} | "
                 f"{_diff(acc, cpu_accuracy)} | {_diff(acc, reference)} | {r['status']} |")
  if cpu_accuracy is None:
    lines.append("\n(no --cpu_mrpc_accuracy given: the CPU column is empty)")
  return lines


def _diff(value, reference):
  return "" if value is None or reference is None else f"{value - reference:+.4f}"


def write_summary(out, steps, facts, args):
  """Step 6: the step table, the figures, and device_check_summary.md / .json."""
  gpu_name = (facts.get("tf", {}).get("gpus") or [{}])[0].get("name")
  if not gpu_name and facts.get("nvidia_smi"):  # a GPU that TensorFlow is missing or blind to
    gpu_name = facts["nvidia_smi"][0].split(",")[0] + " (nvidia-smi; TensorFlow sees none)"
  when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
  lines = [f"# bench/device_check/device_check.py, {when}, {gpu_name or 'no GPU'}"
           f"{' (dry run on the CPU)' if args.dry_run else ''}", "",
           "| step | status | seconds | result |", "|---|---|---|---|"]
  for number, name, status, seconds, text in steps:
    lines.append(f"| {number} {name} | {status} | {seconds:.1f} | {text.replace('|', '/')} |")
  lines += [""] + pretraining_lines(facts.get("pretraining", []), facts.get("pretrain_sizes"),
                                    gpu_name)
  lines += [""] + mrpc_lines(facts.get("mrpc", []), args.cpu_mrpc_accuracy)
  if facts.get("serving"):
    lines += ["", "## Serving (exported SavedModel)", "", facts["serving_line"]]
  if not facts.get("pretraining"):  # the row to compare with, even without figures of ours
    lines += ["", nvidia_lines([], facts["pretrain_sizes"], gpu_name)[0]]
  text = "\n".join(lines) + "\n"
  for line in lines:
    out.line(line)
  with open(os.path.join(out.out_dir, "device_check_summary.md"), "w", encoding="utf-8") as f:
    f.write(text)
  with open(os.path.join(out.out_dir, "device_check.json"), "w", encoding="utf-8") as f:
    json.dump({"steps": steps, "facts": facts}, f, indent=1, default=str)

