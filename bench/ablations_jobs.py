"""The plan, cache and tables of bench_ablations.py (no TensorFlow here: the tests import it).

A run is a list of Jobs, each one script invocation with its own output folder under the work dir.
A job is done when its folder holds result.json (written last, atomically); a done job is never
rerun, and an unfinished one is rerun with the same command, which resumes from the checkpoints
it left (run_pretraining.py, run_classifier.py, run_squad.py and run_ner.py resume from their
--output_dir).
"""
import dataclasses
import json
import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Pretraining rows: name -> (label, run_pretraining.py flags, records kind). Table 8's mixes are
# (MASK, SAME, RND) percentages; 80/10/10 is the BERT row itself.
TABLE5_ROWS = ("bert", "no_nsp", "ltr")
MIXES = ((80, 10, 10), (100, 0, 0), (80, 0, 20), (80, 20, 0), (0, 20, 80), (0, 0, 100))
FINETUNE_TASKS = ("MRPC", "SST-2", "CoNLL", "SQuAD")


def mix_row(mix):
  """The pretraining row of a Table 8 mix: 80/10/10 is the BERT row."""
  return "bert" if tuple(mix) == (80, 10, 10) else "mask_{}_{}_{}".format(*mix)


def parse_mix(text):
  """"100/0/0" -> (100, 0, 0), checked to sum to 100."""
  mix = tuple(int(p) for p in text.split("/"))
  if len(mix) != 3 or sum(mix) != 100:
    raise ValueError(f"a masking mix is MASK/SAME/RND percentages summing to 100, not {text!r}")
  return mix


def pretrain_row_flags(row):
  """(run_pretraining.py flags, records kind) of a pretraining row. The masked-LM rows draw their
  masks at input time (--dynamic_masking) from unmasked records; the left-to-right row predicts
  every next token, from masked records (it rebuilds the text; it refuses --dynamic_masking).
  The No NSP rows read create_pretraining_data.py --no_nsp's single-segment records."""
  if row == "bert":
    return ["--dynamic_masking"], "unmasked"
  if row == "no_nsp":
    return ["--dynamic_masking", "--no_nsp"], "unmasked_no_nsp"
  if row == "ltr":
    return ["--left_to_right"], "masked_no_nsp"
  if row.startswith("mask_"):
    mask, keep, random = (int(p) for p in row.split("_")[1:])
    return ["--dynamic_masking", f"--mask_prob_mask={mask / 100:g}",
            f"--mask_prob_keep={keep / 100:g}", f"--mask_prob_random={random / 100:g}"], "unmasked"
  raise ValueError(f"unknown pretraining row {row!r}")


def row_label(row):
  labels = {"bert": "BERT (MLM + NSP)", "no_nsp": "No NSP", "ltr": "LTR & No NSP"}
  if row in labels:
    return labels[row]
  return "MASK/SAME/RND {}/{}/{}".format(*row.split("_")[1:])


@dataclasses.dataclass
class Job:
  """One script invocation: `command` run in the repo, output in work_dir/name; `parse` reads its
  result (a dict of numbers) from that folder after it ran."""
  name: str
  command: list
  parse: object = None
  kind: str = ""

  def folder(self, work_dir):
    return os.path.join(work_dir, self.name)


def result_path(job, work_dir):
  return os.path.join(job.folder(work_dir), "result.json")


def cached_result(job, work_dir, check_command=True):
  """The job's saved result, or None when it has not finished. A result saved by another command
  (other budgets in the same work dir) is an error: its checkpoints would be resumed too
  (check_command=False: reading a report, where the data jobs' paths are not known)."""
  path = result_path(job, work_dir)
  if not os.path.exists(path):
    return None
  with open(path) as f:
    result = json.load(f)
  command = result.pop("command", None)
  # The interpreter aside (a worktree without its own .venv runs another one's).
  if check_command and command is not None and command[1:] != job.command[1:]:
    raise SystemExit(f"{job.name}: {path} was made by another command (other flags); use "
                     f"another --work_dir, or the flags it was made with")
  return result


def save_result(job, work_dir, result):
  path = result_path(job, work_dir)
  with open(path + ".tmp", "w") as f:
    json.dump(dict(result, command=job.command), f, indent=1, sort_keys=True)
  os.replace(path + ".tmp", path)


def run_job(job, work_dir, log=print):
  """The job's result: the cached one, or runs it (output in <folder>/log.txt) and saves it."""
  result = cached_result(job, work_dir)
  if result is not None:
    log(f"{job.name}: cached {_brief(result)}")
    return result
  folder = job.folder(work_dir)
  os.makedirs(folder, exist_ok=True)
  log(f"{job.name}: running ...")
  start = time.time()
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=REPO)
  with open(os.path.join(folder, "log.txt"), "a") as out:
    out.write("$ " + " ".join(job.command) + "\n")
    out.flush()
    done = subprocess.run(job.command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, env=env)
  if done.returncode:
    with open(os.path.join(folder, "log.txt")) as f:
      tail = f.read()[-3000:]
    raise SystemExit(f"{job.name} failed (exit {done.returncode}); {folder}/log.txt ends:\n{tail}")
  result = dict(job.parse(folder) if job.parse else {})
  result["seconds"] = round(time.time() - start, 1)
  save_result(job, work_dir, result)
  log(f"{job.name}: {_brief(result)}")
  return result


def _brief(result):
  return " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                  for k, v in sorted(result.items()))


def read_key_values(path):
  """eval_results.txt (`key = value` lines) as {key: float}."""
  values = {}
  with open(path) as f:
    for line in f:
      if " = " in line:
        key, value = line.strip().split(" = ", 1)
        try:
          values[key] = float(value)
        except ValueError:
          pass
  return values


def eval_metric(key, scale=100.0, file_name="eval_results.txt"):
  """A parse function: {"score": scale * the key of the folder's eval results}."""

  def parse(folder):
    path = os.path.join(folder, "output", file_name)
    if file_name.endswith(".json"):
      with open(path) as f:
        values = json.load(f)
    else:
      values = read_key_values(path)
    return {"score": scale * float(values[key])}

  return parse


def heldout_metrics(folder):
  """The held-out evaluation's accuracies (its global_step is 0: --init_checkpoint brings the
  weights, not the step)."""
  values = read_key_values(os.path.join(folder, "output", "eval_results.txt"))
  result = {"mlm_accuracy": 100 * values["masked_lm_accuracy"]}
  if "next_sentence_accuracy" in values:
    result["nsp_accuracy"] = 100 * values["next_sentence_accuracy"]
  return result


# ------------------------------------------------------------------------------------ planning


def plan_rows(table8_mixes):
  """The pretraining rows to run, in order: Table 5's, then each Table 8 mix's (once)."""
  rows = list(TABLE5_ROWS)
  for mix in table8_mixes:
    if mix_row(mix) not in rows:
      rows.append(mix_row(mix))
  return rows


def figure5_steps(total_steps, points):
  """`points` pretraining steps evenly up to total_steps, 0 (no pretraining) first; the last is
  total_steps itself."""
  steps = sorted({0} | {round(total_steps * i / (points - 1)) for i in range(1, points)})
  return steps


def finetune_plan(table8_mixes, table8_task, figure5_task, bilstm_tasks):
  """(row, task, variant) fine-tunings in order; variant is "", "bilstm", "feature" or
  "step<N>" (Figure 5, from the BERT row's checkpoint at step N, 0: random init)."""
  plan = [(row, task, "") for row in TABLE5_ROWS for task in FINETUNE_TASKS]
  plan += [("ltr", task, "bilstm") for task in bilstm_tasks]
  for mix in table8_mixes:
    row = mix_row(mix)
    if (row, table8_task, "") not in plan:
      plan.append((row, table8_task, ""))
    plan.append((row, "CoNLL", "feature"))
  return plan


# ------------------------------------------------------------------------------------ tables


def cell(value, fmt=".1f"):
  return "-" if value is None else format(value, fmt)


def markdown_table(header, rows):
  lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  lines += ["| " + " | ".join(row) + " |" for row in rows]
  return "\n".join(lines)


def table5(results):
  """results: {"heldout": {row: {...}}, "finetune": {(row, task, variant): score}}."""
  header = ["pretraining", "held-out MLM acc", "MRPC acc", "SST-2 acc", "CoNLL F1", "SQuAD F1"]
  lines = []
  for row in TABLE5_ROWS:
    heldout = results["heldout"].get(row, {}).get("mlm_accuracy")
    lines.append([row_label(row), cell(heldout) + (" (next token)" if row == "ltr" and heldout
                                                   is not None else "")] +
                 [cell(results["finetune"].get((row, task, ""))) for task in FINETUNE_TASKS])
  bilstm = [results["finetune"].get(("ltr", task, "bilstm")) for task in FINETUNE_TASKS]
  if any(v is not None for v in bilstm):
    lines.append(["+ BiLSTM (LTR & No NSP, --bilstm_head)", "-"] + [cell(v) for v in bilstm])
  baseline = results.get("baseline", {})
  if baseline:
    lines.append(["trivial: majority class, no answer, all O", "-"] +
                 [cell(baseline.get(task)) for task in FINETUNE_TASKS])
  return markdown_table(header, lines)


def table8(results, mixes, task):
  header = ["MASK", "SAME", "RND", "held-out MLM acc", f"fine-tune {task}",
            "feature-based CoNLL F1"]
  lines = []
  for mix in mixes:
    row = mix_row(mix)
    lines.append([f"{m}%" for m in mix] + [
        cell(results["heldout"].get(row, {}).get("mlm_accuracy")),
        cell(results["finetune"].get((row, task, ""))),
        cell(results["finetune"].get((row, "CoNLL", "feature")))])
  return markdown_table(header, lines)


def figure5_table(points, task):
  """points: [(pretraining step, dev score or None)]."""
  return markdown_table(["pretraining steps", f"{task} dev acc"],
                        [[str(step), cell(score)] for step, score in points])


def compare(value, others, better):
  """"yes" when value is strictly better (better: max or min) than every one of others, "tie"
  when it equals the best of them, "no" otherwise; None without figures."""
  others = [v for v in others if v is not None]
  if value is None or not others:
    return None
  best = better(others)
  if value == best:
    return "tie"
  return "yes" if better(value, best) == value else "no"


def orderings(results, mixes, table8_task):
  """The paper's orderings, each as (claim, "yes" / "no" / "tie" / None: a figure is missing)."""
  ft = results["finetune"]

  def greater(a, b):
    return compare(ft.get(a), [ft.get(b)], max)

  claims = [("BERT > No NSP on MRPC", greater(("bert", "MRPC", ""), ("no_nsp", "MRPC", ""))),
            ("No NSP > LTR on SQuAD", greater(("no_nsp", "SQuAD", ""), ("ltr", "SQuAD", ""))),
            ("No NSP > LTR on CoNLL", greater(("no_nsp", "CoNLL", ""), ("ltr", "CoNLL", ""))),
            ("+ BiLSTM > LTR on SQuAD", greater(("ltr", "SQuAD", "bilstm"), ("ltr", "SQuAD", "")))]
  for variant, task, name in (("feature", "CoNLL", "feature-based CoNLL"),
                              ("", table8_task, f"fine-tuned {table8_task}")):
    scores = {mix: ft.get((mix_row(mix), task, variant)) for mix in mixes}
    for mix, better, word in (((80, 10, 10), max, "best"), ((0, 0, 100), min, "worst")):
      if mix in scores and len(scores) > 1:
        others = [v for m, v in scores.items() if m != mix]
        claims.append(("{}/{}/{} {} {}".format(*mix, word, name),
                       compare(scores[mix], others, better)))
  return claims


def python():
  return sys.executable
