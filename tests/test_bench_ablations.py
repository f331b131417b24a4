"""bench/bench_ablations.py without running it: the row and fine-tuning plan, the commands it
gives each script, the job cache (a finished job is not rerun, a failed one is), the result
parsing and the tables."""
import json
import os
import sys

import pytest

from support.paths import REPO

sys.path.insert(0, os.path.join(REPO, "bench"))

import ablations_jobs as jobs  # noqa: E402
import bench_ablations  # noqa: E402


def test_mixes_and_rows():
  assert jobs.parse_mix("0/20/80") == (0, 20, 80)
  with pytest.raises(ValueError):
    jobs.parse_mix("80/10/20")
  with pytest.raises(ValueError):
    jobs.parse_mix("80/20")
  assert jobs.mix_row((80, 10, 10)) == "bert"
  assert jobs.mix_row((0, 0, 100)) == "mask_0_0_100"
  # 80/10/10 is the BERT row: it is pretrained once.
  assert jobs.plan_rows([(80, 10, 10), (100, 0, 0), (0, 0, 100)]) == [
      "bert", "no_nsp", "ltr", "mask_100_0_0", "mask_0_0_100"]
  assert jobs.row_label("mask_0_20_80") == "MASK/SAME/RND 0/20/80"


def test_pretrain_row_flags():
  assert jobs.pretrain_row_flags("bert") == (["--dynamic_masking"], "unmasked")
  assert jobs.pretrain_row_flags("no_nsp") == (["--dynamic_masking", "--no_nsp"],
                                               "unmasked_no_nsp")
  # The left-to-right row refuses --dynamic_masking: masked records, text rebuilt.
  assert jobs.pretrain_row_flags("ltr") == (["--left_to_right"], "masked_no_nsp")
  flags, kind = jobs.pretrain_row_flags("mask_80_0_20")
  assert kind == "unmasked" and flags == ["--dynamic_masking", "--mask_prob_mask=0.8",
                                          "--mask_prob_keep=0", "--mask_prob_random=0.2"]
  with pytest.raises(ValueError):
    jobs.pretrain_row_flags("bogus")


def test_figure5_steps_and_checkpoints():
  assert jobs.figure5_steps(150, 4) == [0, 50, 100, 150]
  assert jobs.figure5_steps(4, 3) == [0, 2, 4]
  args = bench_ablations.parse_args(["--pretrain_steps=120", "--figure5_points=5"])
  assert bench_ablations.checkpoint_interval(args) == 30


def test_finetune_plan():
  mixes = [(80, 10, 10), (0, 0, 100)]
  plan = jobs.finetune_plan(mixes, "CoNLL", "SST-2", ["SQuAD"])
  assert len(plan) == len(set(plan))
  for row in jobs.TABLE5_ROWS:
    assert {(row, task, "") for task in jobs.FINETUNE_TASKS} <= set(plan)
  assert ("ltr", "SQuAD", "bilstm") in plan
  # Table 8: the BERT row's CoNLL fine-tuning is Table 5's; each mix gets a feature-based run.
  assert [p for p in plan if p[0] == "mask_0_0_100"] == [("mask_0_0_100", "CoNLL", ""),
                                                         ("mask_0_0_100", "CoNLL", "feature")]
  assert ("bert", "CoNLL", "feature") in plan


def test_parse_args_budgets():
  full, quick = bench_ablations.parse_args([]), bench_ablations.parse_args(["--quick"])
  assert full.pretrain_steps == bench_ablations.FULL["pretrain_steps"]
  assert quick.pretrain_steps == bench_ablations.QUICK["pretrain_steps"] < full.pretrain_steps
  assert bench_ablations.parse_args(["--quick", "--pretrain_steps=6"]).pretrain_steps == 6
  assert len(quick.mixes) == 2 and quick.mixes[0] == (80, 10, 10)


def _args(tmp_path):
  return bench_ablations.parse_args([f"--work_dir={tmp_path}", "--pretrain_steps=150",
                                    "--figure5_points=4"])


def test_pretrain_commands(tmp_path):
  args = _args(tmp_path)
  files = {"unmasked": "U.tfrecord", "unmasked_no_nsp": "UN.tfrecord",
           "masked_no_nsp": "MN.tfrecord", "heldout": "H.tfrecord", "heldout_no_nsp": "HN.tfrecord"}
  train, heldout = bench_ablations.pretrain_jobs(args, str(tmp_path), "c.json", files, "ltr")
  assert "--input_file=MN.tfrecord" in train.command and "--left_to_right" in train.command
  assert "--dynamic_masking" not in train.command and "--keep_checkpoint_max=1" in train.command
  assert "--input_file=HN.tfrecord" in heldout.command and "--left_to_right" in heldout.command
  assert f"--init_checkpoint={tmp_path}/pretrain_ltr/output" in heldout.command
  train, heldout = bench_ablations.pretrain_jobs(args, str(tmp_path), "c.json", files, "bert")
  assert "--input_file=U.tfrecord" in train.command and "--dynamic_masking" in train.command
  # Every Figure 5 checkpoint (50, 100, 150) is saved and kept.
  assert {"--save_checkpoints_steps=50", "--keep_checkpoint_max=4"} <= set(train.command)
  assert "--dynamic_masking" not in heldout.command and "--do_eval" in heldout.command
  assert "--input_file=H.tfrecord" in heldout.command
  train, heldout = bench_ablations.pretrain_jobs(args, str(tmp_path), "c.json", files, "no_nsp")
  assert "--input_file=UN.tfrecord" in train.command
  assert {"--no_nsp", "--input_file=HN.tfrecord"} <= set(heldout.command)


def test_finetune_commands(tmp_path):
  args = _args(tmp_path)
  data = {"MRPC": "mrpc", "SST-2": "sst", "CoNLL": "conll", "SQuAD": "squad"}

  def command(row, task, variant=""):
    job = bench_ablations.finetune_job(args, str(tmp_path), "c.json", data, row, task, variant)
    return job.name, job.command

  name, cmd = command("ltr", "SQuAD", "bilstm")
  assert name == "finetune_ltr_SQuAD_bilstm" and cmd[1] == "run_squad.py"
  assert {"--bilstm_head", "--bilstm_hidden_size=128", "--train_file=squad/train.json",
          f"--init_checkpoint={tmp_path}/pretrain_ltr/output"} <= set(cmd)
  assert "--left_to_right" in cmd  # the LTR row stays left-only when fine-tuned
  assert "--left_to_right" not in command("no_nsp", "SQuAD")[1]
  _, cmd = command("mask_0_0_100", "CoNLL", "feature")
  assert cmd[1] == "run_ner.py" and "--feature_based" in cmd
  assert [c for c in cmd if c.startswith("--learning_rate")] == ["--learning_rate=1e-3"]
  _, cmd = command("bert", "SST-2", "step0")
  assert cmd[1] == "run_classifier.py" and not any("init_checkpoint" in c for c in cmd)
  _, cmd = command("bert", "SST-2", "step50")
  assert f"--init_checkpoint={tmp_path}/pretrain_bert/output/model.ckpt-50" in cmd
  _, cmd = command("no_nsp", "MRPC")
  assert {"--task_name=MRPC", "--data_dir=mrpc", "--do_eval"} <= set(cmd)


def test_data_jobs(tmp_path):
  args = _args(tmp_path)
  by_name = {job.name: job.command for job in bench_ablations.data_jobs(args, str(tmp_path))}
  assert set(by_name) == {"records_unmasked", "records_unmasked_no_nsp", "records_masked_no_nsp",
                          "records_heldout", "records_heldout_no_nsp", "squad_data"}
  for name, command in by_name.items():
    inputs = [c for c in command if c.startswith("--input_file=")]
    if name.startswith("records_heldout"):
      assert inputs == ["--input_file=" + os.path.join(args.data_dir, "corpus", "gutenberg",
                                                       bench_ablations.HELD_OUT_BOOK)]
    elif name.startswith("records"):
      assert bench_ablations.HELD_OUT_BOOK not in inputs[0] and inputs[0].count(",") >= 2
    assert ("--unmasked" in command) == ("unmasked" in name)
    assert ("--no_nsp" in command) == name.endswith("no_nsp")
  assert "--num_train=1000" in by_name["squad_data"]


def _write_job(tmp_path, name, code, parse=None):
  return jobs.Job(name, [sys.executable, "-c", code], parse=parse)


def test_run_job_caches_and_resumes(tmp_path):
  work = str(tmp_path)
  counter = tmp_path / "runs.txt"
  code = (f"open({str(counter)!r}, 'a').write('x'); import os; "
          f"os.makedirs({str(tmp_path / 'j' / 'output')!r}, exist_ok=True); "
          f"open({str(tmp_path / 'j' / 'output' / 'eval_results.txt')!r}, 'w')"
          ".write('eval_accuracy = 0.75\\nglobal_step = 9\\n')")
  job = _write_job(tmp_path, "j", code, jobs.eval_metric("eval_accuracy"))
  logged = []
  result = jobs.run_job(job, work, logged.append)
  assert result["score"] == pytest.approx(75.0) and "seconds" in result
  assert jobs.run_job(job, work, logged.append)["score"] == pytest.approx(75.0)
  assert counter.read_text() == "x"  # the second call took the cached result
  assert logged[-1].startswith("j: cached")
  with open(tmp_path / "j" / "result.json") as f:
    assert json.load(f)["score"] == pytest.approx(75.0)
  # The same job name with other flags (another budget) does not take the old result.
  other = jobs.Job("j", job.command + ["--other"], parse=job.parse)
  with pytest.raises(SystemExit, match="another command"):
    jobs.run_job(other, work, logged.append)
  assert counter.read_text() == "x"


def test_run_job_failure_is_rerun(tmp_path):
  work = str(tmp_path)
  flag = tmp_path / "ok"
  code = f"import os, sys; sys.exit(0 if os.path.exists({str(flag)!r}) else 3)"
  job = _write_job(tmp_path, "f", code)
  with pytest.raises(SystemExit, match="exit 3"):
    jobs.run_job(job, work, lambda m: None)
  assert jobs.cached_result(job, work) is None
  flag.write_text("")
  assert set(jobs.run_job(job, work, lambda m: None)) == {"seconds"}
  assert "$ " in (tmp_path / "f" / "log.txt").read_text()


def test_heldout_and_squad_parsing(tmp_path):
  out = tmp_path / "output"
  out.mkdir()
  (out / "eval_results.txt").write_text(
      "global_step = 150\nloss = 5.5\nmasked_lm_accuracy = 0.125\nnext_sentence_accuracy = 0.5\n"
      "name = not a number\n")
  assert jobs.heldout_metrics(str(tmp_path)) == {"mlm_accuracy": 12.5, "nsp_accuracy": 50.0}
  (out / "eval_results.json").write_text(json.dumps({"f1": 41.5, "exact": 40.0}))
  parse = jobs.eval_metric("f1", scale=1.0, file_name="eval_results.json")
  assert parse(str(tmp_path)) == {"score": 41.5}


def _results():
  finetune = {("bert", "MRPC", ""): 70.0, ("no_nsp", "MRPC", ""): 68.0,
              ("no_nsp", "SQuAD", ""): 40.0, ("ltr", "SQuAD", ""): 35.0,
              ("ltr", "SQuAD", "bilstm"): 37.0, ("bert", "CoNLL", "feature"): 50.0,
              ("mask_0_0_100", "CoNLL", "feature"): 55.0, ("bert", "CoNLL", ""): 60.0,
              ("mask_0_0_100", "CoNLL", ""): 52.0}
  return {"heldout": {"bert": {"mlm_accuracy": 12.34}, "ltr": {"mlm_accuracy": 20.0}},
          "finetune": finetune}


def test_tables():
  results = _results()
  table = jobs.table5(results).splitlines()
  assert table[0].startswith("| pretraining | held-out MLM acc | MRPC acc")
  assert table[2] == "| BERT (MLM + NSP) | 12.3 | 70.0 | - | 60.0 | - |"
  assert table[4] == "| LTR & No NSP | 20.0 (next token) | - | - | - | 35.0 |"
  assert table[5] == "| + BiLSTM (LTR & No NSP, --bilstm_head) | - | - | - | - | 37.0 |"
  assert len(table) == 6
  results["baseline"] = {"MRPC": 68.38, "CoNLL": 0.0}
  assert jobs.table5(results).splitlines()[6] == (
      "| trivial: majority class, no answer, all O | - | 68.4 | - | 0.0 | - |")
  table = jobs.table8(results, [(80, 10, 10), (0, 0, 100)], "CoNLL").splitlines()
  assert table[2] == "| 80% | 10% | 10% | 12.3 | 60.0 | 50.0 |"
  assert table[3] == "| 0% | 0% | 100% | - | 52.0 | 55.0 |"
  assert jobs.figure5_table([(0, 50.0), (10, None)], "SST-2").splitlines()[3] == "| 10 | - |"


def test_orderings():
  claims = dict(jobs.orderings(_results(), [(80, 10, 10), (0, 0, 100)], "CoNLL"))
  assert claims["BERT > No NSP on MRPC"] == "yes"
  assert claims["No NSP > LTR on SQuAD"] == "yes"
  assert claims["No NSP > LTR on CoNLL"] is None  # no figures
  assert claims["+ BiLSTM > LTR on SQuAD"] == "yes"
  assert claims["80/10/10 best feature-based CoNLL"] == "no"
  assert claims["0/0/100 worst feature-based CoNLL"] == "no"
  assert claims["80/10/10 best fine-tuned CoNLL"] == "yes"
  assert claims["0/0/100 worst fine-tuned CoNLL"] == "yes"


def test_compare():
  assert jobs.compare(5.0, [4.0, 3.0], max) == "yes"
  assert jobs.compare(5.0, [5.0, 3.0], max) == "tie"
  assert jobs.compare(4.0, [5.0, None], max) == "no"
  assert jobs.compare(1.0, [2.0, 3.0], min) == "yes"
  assert jobs.compare(None, [2.0], min) is None and jobs.compare(1.0, [None], min) is None


def test_trivial_baselines(tmp_path):
  os.makedirs(tmp_path / "data" / "MRPC")
  (tmp_path / "data" / "MRPC" / "dev.tsv").write_text(
      "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n" +
      "1\ta\tb\tx\ty\n" * 3 + "0\ta\tb\tx\ty\n")
  os.makedirs(tmp_path / "squad_data" / "output")
  qas = [{"id": str(i), "is_impossible": i < 1} for i in range(4)]
  (tmp_path / "squad_data" / "output" / "dev.json").write_text(
      json.dumps({"data": [{"paragraphs": [{"qas": qas}]}]}))
  assert bench_ablations.trivial_baselines(str(tmp_path)) == {"CoNLL": 0.0, "MRPC": 75.0,
                                                              "SQuAD": 25.0}


def test_cut_lines(tmp_path):
  path = tmp_path / "train.tsv"
  path.write_text("header\n" + "".join(f"row{i}\n" for i in range(10)))
  bench_ablations.cut_lines(str(path), 3)
  assert path.read_text() == "header\nrow0\nrow1\nrow2\n"
  path.write_text("header\n" + "".join(f"row{i}\n" for i in range(10)))
  bench_ablations.cut_lines(str(path), 4, seed=1)
  first = path.read_text()
  path.write_text("header\n" + "".join(f"row{i}\n" for i in range(10)))
  bench_ablations.cut_lines(str(path), 4, seed=1)
  assert path.read_text() == first and len(first.splitlines()) == 5
  bench_ablations.cut_lines(str(path), 0)
  assert path.read_text() == first


def test_report_only_reads_finished_jobs(tmp_path):
  args = bench_ablations.parse_args([f"--work_dir={tmp_path}", "--report_only",
                                    "--pretrain_steps=150", "--figure5_points=4"])
  finished = {"heldout_bert": {"mlm_accuracy": 11.0, "step": 150, "seconds": 9.0},
              "finetune_bert_MRPC": {"score": 68.4, "seconds": 30.0},
              "finetune_bert_SST-2_step50": {"score": 55.0, "seconds": 20.0},
              "finetune_mask_0_0_100_CoNLL_feature": {"score": 12.5, "seconds": 40.0}}
  for name, result in finished.items():
    os.makedirs(tmp_path / name)
    (tmp_path / name / "result.json").write_text(json.dumps(result))  # saved without a command
  os.makedirs(tmp_path / "finetune_no_nsp_MRPC")  # started, not finished: no result.json
  results = bench_ablations.run_all(args, str(tmp_path), lambda m: None)
  assert results["heldout"]["bert"]["mlm_accuracy"] == 11.0
  assert results["finetune"][("bert", "MRPC", "")] == 68.4
  assert results["finetune"][("no_nsp", "MRPC", "")] is None
  assert results["finetune"][("mask_0_0_100", "CoNLL", "feature")] == 12.5
  assert results["seconds"] == {name: r["seconds"] for name, r in finished.items()}
  # Figure 5's last point is Table 5's SST-2 fine-tuning (not finished here).
  assert bench_ablations.figure5_points(args, results) == [(0, None), (50, 55.0), (100, None),
                                                           (150, None)]
  # Nothing was written: no data, no config.
  assert sorted(os.listdir(tmp_path)) == sorted(list(finished) + ["finetune_no_nsp_MRPC"])
