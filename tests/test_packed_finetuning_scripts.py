"""--pack_sequences end to end, run_classifier.py (run_squad.py refuses it; run_ner.py and
run_swag.py: test_packed_ner_swag_scripts.py): packed training runs (bfloat16, mirrored, gradient
accumulation) and logs examples per second, and evaluating and predicting the same checkpoint
packed or unpacked gives the same eval_results.txt and the same prediction files."""

import numpy as np

from support.script_runner import run_script
from support.task_data import synthetic_sst2
from support.tiny import WORDS, close, common_args, read_results, write_config, write_vocab


def test_classifier_packed_training_and_the_same_eval_and_predictions(tmp_path):
  vocab = write_vocab(tmp_path)
  config = write_config(tmp_path / "bert_config.json", len(WORDS))
  synthetic_sst2(tmp_path / "data", seed=1, n=96)
  trained = tmp_path / "packed"
  result = run_script(
      "run_classifier.py", *common_args(tmp_path / "data", vocab, config, trained),
      "--task_name=SST-2", "--do_train", "--do_eval", "--pack_sequences",
      "--train_batch_size=4", "--gradient_accumulation_steps=2", "--num_train_epochs=2",
      "--learning_rate=2e-3", "--dtype=bfloat16", "--distribution_strategy=mirrored",
      "--log_steps=2", "--eval_every_n_steps=4")
  assert result.returncode == 0, result.stderr[-3000:]
  log = result.stderr
  assert "Packed into" in log and "examples_per_row" in log and "examples_per_second" in log
  assert "eval at step 4" in log  # evaluations during training, packed
  rows = int(log.split("Packed into ")[1].split()[0])
  assert rows < 96 / 3  # 3 to 9 words a sentence, rows of 32 tokens
  assert read_results(trained)["global_step"] == int(rows / 4 * 2)
  # The same checkpoint, evaluated and predicted in float32 packed and unpacked.
  outputs = {}
  for packed in (True, False):
    output_dir = tmp_path / ("eval_packed" if packed else "eval_unpacked")
    result = run_script(
        "run_classifier.py", *common_args(tmp_path / "data", vocab, config, output_dir),
        "--task_name=SST-2", "--do_eval", "--do_predict", f"--init_checkpoint={trained}",
        "--eval_batch_size=16", *(["--pack_sequences", "--max_instances_per_row=5"]
                                 if packed else []))
    assert result.returncode == 0, result.stderr[-3000:]
    outputs[packed] = output_dir
  close(read_results(outputs[True]), read_results(outputs[False]))
  np.testing.assert_allclose(np.loadtxt(outputs[True] / "test_results.tsv"),
                             np.loadtxt(outputs[False] / "test_results.tsv"), atol=1e-5)
  assert ((outputs[True] / "SST-2.tsv").read_text() ==
          (outputs[False] / "SST-2.tsv").read_text())


def test_run_squad_refuses_pack_sequences(tmp_path):
  result = run_script("run_squad.py", f"--vocab_file={write_vocab(tmp_path)}",
                      f"--bert_config_file={write_config(tmp_path / 'c.json', len(WORDS))}",
                      f"--output_dir={tmp_path / 'out'}", "--train_file=x.json", "--do_train",
                      "--max_seq_length=64", "--doc_stride=16", "--pack_sequences")
  assert result.returncode == 1
  assert result.stderr.strip().splitlines()[-1].startswith(
      "error: --pack_sequences: not supported by run_squad.py")
  result = run_script("run_classifier.py", "--task_name=SST-2", f"--data_dir={tmp_path}",
                      f"--vocab_file={write_vocab(tmp_path)}",
                      f"--bert_config_file={write_config(tmp_path / 'c.json', len(WORDS))}",
                      f"--output_dir={tmp_path / 'out'}", "--do_train", "--pack_sequences",
                      "--max_seq_length=32", "--bilstm_head")
  assert result.returncode == 1
  assert result.stderr.strip().splitlines()[-1].startswith(
      "error: --pack_sequences: not with --bilstm_head")
