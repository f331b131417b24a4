"""--pack_sequences end to end, run_ner.py and run_swag.py: a packed training run, then the same
checkpoint evaluated and predicted unpacked gives the same entity scores (SWAG: accuracy and loss)
and the same prediction files as the packed run's (test_packed_finetuning_scripts.py: the
classifier)."""
import numpy as np

from support.script_runner import run_script
from support.task_data import synthetic_swag, with_layers
from support.tiny import WORDS, close, common_args, read_results, write_config, write_vocab


def test_ner_packed_gives_the_same_entity_scores_and_predictions(conll_data, tmp_path):
  data = conll_data
  # One layer, not conll_data's four: packed and unpacked agree or not at any depth, and each run
  # traces every layer.
  common = with_layers(data.common, tmp_path, 1)
  outputs = {True: data.tmp / "ner_packed", False: data.tmp / "ner_unpacked"}
  result = run_script("run_ner.py", *common, f"--output_dir={outputs[True]}", "--do_train",
                      "--do_eval", "--do_predict", "--pack_sequences", "--num_train_epochs=2",
                      "--predict_batch_size=32", timeout=600)
  assert result.returncode == 0, result.stderr[-3000:]
  result = run_script("run_ner.py", *common, f"--output_dir={outputs[False]}",
                      f"--init_checkpoint={outputs[True]}", "--do_eval", "--do_predict",
                      "--predict_batch_size=32", timeout=600)
  assert result.returncode == 0, result.stderr[-3000:]

  def results(output_dir, name):
    with open(output_dir / name) as f:
      return {k: float(v) for k, v in (line.strip().split(" = ") for line in f)}

  for name in ("eval_results.txt", "test_results.txt"):
    close(results(outputs[True], name), results(outputs[False], name))
  assert ((outputs[True] / "test_predictions.txt").read_text() ==
          (outputs[False] / "test_predictions.txt").read_text())


def test_swag_packs_each_example_choices_into_one_row(tmp_path):
  data_dir = tmp_path / "swag"
  data_dir.mkdir()
  for name, seed, n in (("train.csv", 1, 32), ("val.csv", 2, 12), ("test.csv", 3, 5)):
    synthetic_swag(data_dir / name, seed, n)
  vocab, config = write_vocab(tmp_path), write_config(tmp_path / "c.json", len(WORDS))
  outputs = {}
  for packed in (True, False):
    output_dir = tmp_path / f"out_{packed}"
    flags = ["--do_eval", "--do_predict", f"--init_checkpoint={outputs[True]}"] if not packed \
        else ["--do_train", "--do_eval", "--do_predict", "--train_batch_size=4",
              "--num_train_epochs=1", "--pack_sequences"]
    result = run_script("run_swag.py", *common_args(data_dir, vocab, config, output_dir),
                        "--max_seq_length=16", "--predict_batch_size=16", *flags)
    assert result.returncode == 0, result.stderr[-3000:]
    outputs[packed] = output_dir
  close(read_results(outputs[True]), read_results(outputs[False]))
  packed = (outputs[True] / "test_results.tsv").read_text().splitlines()
  unpacked = (outputs[False] / "test_results.tsv").read_text().splitlines()
  assert [row.split("\t")[0] for row in packed] == [row.split("\t")[0] for row in unpacked]
  np.testing.assert_allclose(
      [[float(p) for p in row.split("\t")[1:]] for row in packed[1:]],
      [[float(p) for p in row.split("\t")[1:]] for row in unpacked[1:]], atol=2e-6)
