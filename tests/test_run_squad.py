"""run_squad.py end to end on the real SQuAD 2.0 dev subset: train briefly (tiny model), predict
with v2.0 on, check the output files are in the official format and score as the official script
does; predict again from the checkpoint with --tune_null_threshold; the CLI's bad-input errors."""
import json
import os
import types

import pytest

from bert_tf.cli import flags as bert_flags
from bert_tf.errors import BertTfError
from bert_tf.drivers import finetuning
from bert_tf.model.config import BertConfig
from bert_tf.tasks import squad
from bert_tf.text import tokenization
from support.script_runner import run_script
from support.paths import shared_data
from support import terminal
from support.task_data import small_vocab


def _run(*args):
  return run_script("run_squad.py", *args, timeout=600)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
  predict_file = shared_data("squad", "dev-v2.0.subset.json")
  with open(predict_file) as f:
    dataset = json.load(f)
  tmp = tmp_path_factory.mktemp("run_squad")
  vocab_size = small_vocab(dataset, tmp / "vocab.txt")
  BertConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
             intermediate_size=37, max_position_embeddings=128).to_json_file(
                 str(tmp / "bert_config.json"))
  common = [f"--vocab_file={tmp / 'vocab.txt'}", f"--bert_config_file={tmp / 'bert_config.json'}",
            f"--predict_file={predict_file}", "--max_seq_length=96", "--doc_stride=32",
            "--max_query_length=24", "--version_2_with_negative", "--n_best_size=5"]
  output_dir = tmp / "out"
  result = _run(*common, f"--train_file={predict_file}", f"--output_dir={output_dir}",
                "--do_train", "--do_predict", "--train_batch_size=4", "--num_train_epochs=2",
                "--learning_rate=1e-3", "--save_checkpoints_steps=100")
  assert result.returncode == 0, result.stderr[-3000:]
  return types.SimpleNamespace(dataset=dataset, output_dir=output_dir, common=common, tmp=tmp,
                               log=result.stderr)


def _load(output_dir, name):
  with open(os.path.join(output_dir, name)) as f:
    return json.load(f)


def test_train_and_predict_v2_files_in_official_format(trained):
  v2 = pytest.importorskip("official.nlp.tools.squad_evaluate_v2_0")
  qids = [qa["id"] for a in trained.dataset["data"] for p in a["paragraphs"] for qa in p["qas"]]
  predictions = _load(trained.output_dir, "predictions.json")
  null_odds = _load(trained.output_dir, "null_odds.json")
  nbest = _load(trained.output_dir, "nbest_predictions.json")
  evaluation = _load(trained.output_dir, "eval_results.json")
  assert sorted(predictions) == sorted(qids) == sorted(null_odds) == sorted(nbest)
  assert all(isinstance(v, str) for v in predictions.values())
  assert all(isinstance(v, float) for v in null_odds.values())
  for qid, entries in nbest.items():
    assert 1 <= len(entries) <= 6 and any(e["text"] == "" for e in entries)
    assert set(entries[0]) == {"text", "probability", "start_logit", "end_logit"}
    # Threshold 0: "" exactly where the null score beats the best non-null answer.
    assert (predictions[qid] == "") == (null_odds[qid] > 0.0) or not predictions[qid]
  # Answers are whitespace-normalized spans of the contexts.
  context = " ".join(" ".join(p["context"].split())
                     for a in trained.dataset["data"] for p in a["paragraphs"])
  assert all(text in context for text in predictions.values())
  # What the official script prints for predictions.json is what we wrote in eval_results.json.
  official = v2.evaluate(trained.dataset["data"], predictions)
  for key in ("exact", "f1", "total", "HasAns_exact", "HasAns_f1", "NoAns_exact", "NoAns_f1"):
    assert evaluation[key] == pytest.approx(official[key]), key
  assert evaluation["null_score_diff_threshold"] == 0.0
  assert evaluation["best_f1"] >= evaluation["f1"]
  assert os.path.exists(os.path.join(trained.output_dir, "eval.tf_record"))


def test_the_log_is_in_order_and_ends_with_exact_match_f1_and_the_threshold(trained):
  log = trained.log
  assert terminal.chatter(log) == []
  assert log.index("Running training") < log.index("Running predictions")
  figures = terminal.closing_figures(log)
  evaluation = _load(trained.output_dir, "eval_results.json")
  for key in ("exact", "f1", "null_score_diff_threshold", "best_f1", "best_f1_thresh"):
    assert float(figures[key]) == pytest.approx(evaluation[key], rel=1e-3, abs=1e-4), key


def test_predict_from_checkpoint_with_tuned_threshold(trained):
  v2 = pytest.importorskip("official.nlp.tools.squad_evaluate_v2_0")
  before = _load(trained.output_dir, "eval_results.json")
  result = _run(*trained.common, f"--output_dir={trained.output_dir}", "--do_predict",
                "--tune_null_threshold")
  assert result.returncode == 0, result.stderr[-3000:]
  tuned = _load(trained.output_dir, "eval_results.json")
  predictions = _load(trained.output_dir, "predictions.json")
  null_odds = _load(trained.output_dir, "null_odds.json")
  assert tuned["null_score_diff_threshold"] == pytest.approx(before["best_f1_thresh"])
  assert tuned["f1"] == pytest.approx(before["best_f1"])  # the same checkpoint, so the same logits
  threshold = tuned["null_score_diff_threshold"]
  assert all((predictions[q] == "") == (null_odds[q] > threshold) or not predictions[q]
             for q in predictions)
  assert v2.evaluate(trained.dataset["data"], predictions)["f1"] == pytest.approx(tuned["f1"])


def _run_squad(values):
  """finetuning.run of run_squad.py's flag values, through the script's door."""
  finetuning.run(squad.SquadTask, bert_flags.finetune_options(squad.SquadTask, values))


def test_cli_bad_input(tmp_path):
  config = tmp_path / "bert_config.json"
  BertConfig(vocab_size=8, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
             intermediate_size=37, max_position_embeddings=64).to_json_file(str(config))
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n")
  not_squad = tmp_path / "not_squad.json"
  not_squad.write_text(json.dumps({"version": "v2.0", "articles": []}))
  result = _run(f"--vocab_file={vocab}", f"--bert_config_file={config}",
                f"--output_dir={tmp_path / 'out'}", "--do_predict", f"--predict_file={not_squad}",
                "--max_seq_length=64", "--max_query_length=16", "--doc_stride=16")
  assert result.returncode == 1
  assert result.stderr.strip().splitlines()[-1] == (
      f"error: {not_squad}: not SQuAD JSON: the top level has no key 'data'")

  flag_values = dict(do_lower_case=True, init_checkpoint=None, do_train=False, do_predict=True,
                     train_file=None, predict_file=str(not_squad), max_seq_length=64,
                     doc_stride=48, max_query_length=16, tune_null_threshold=False,
                     version_2_with_negative=False, vocab_file=str(vocab),
                     bert_config_file=str(config), output_dir=str(tmp_path / "out"))
  flag_values.update(max_query_length=64)
  with pytest.raises(BertTfError, match="--max_seq_length .64. must be greater than"):
    _run_squad(types.SimpleNamespace(**flag_values))
  flag_values.update(doc_stride=16, max_seq_length=128, max_query_length=16)
  with pytest.raises(BertTfError, match="--max_seq_length: cannot use sequence length 128"):
    _run_squad(types.SimpleNamespace(**flag_values))
  flag_values.update(max_seq_length=64, tune_null_threshold=True)
  with pytest.raises(BertTfError, match="--tune_null_threshold: needs --version_2_with_negative"):
    _run_squad(types.SimpleNamespace(**flag_values))


def test_v1_answers_and_official_v1_score(tmp_path):
  """SQuAD 1.1 (the AllenNLP fixture, no "version" key): files and eval_results.json without
  running a model: logits that point at each first gold answer's word pieces."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  from bert_tf.tasks import squad_answers  # pylint: disable=g-import-not-at-top
  v1 = pytest.importorskip("official.nlp.tools.squad_evaluate_v1_1")
  predict_file = shared_data("squad", "allennlp-squad-v1-style.json")
  dataset = squad.load_squad_json(predict_file)
  vocab = tmp_path / "vocab.txt"
  small_vocab(dataset, vocab)
  tokenizer = tokenization.FullTokenizer(str(vocab), do_lower_case=True)
  # The training reader wants one answer a question: the first one gives the target positions.
  first_answers = json.loads(json.dumps(dataset))
  for article in first_answers["data"]:
    for paragraph in article["paragraphs"]:
      for qa in paragraph["qas"]:
        qa["answers"] = qa["answers"][:1]
  (tmp_path / "first.json").write_text(json.dumps(first_answers))
  train_view = squad.read_squad_examples(str(tmp_path / "first.json"), is_training=True)
  examples = squad.read_squad_examples(predict_file, is_training=False)
  features = squad.convert_examples_to_features(train_view, tokenizer, 128, 48, 32, True)
  results = []
  for feature in features:
    start, end = np.zeros(128, np.float32), np.zeros(128, np.float32)
    start[feature.start_position] = end[feature.end_position] = 10.0
    results.append(squad_answers.RawResult(feature.unique_id, start, end))
  f = squad.SquadOptions(version_2_with_negative=False, null_score_diff_threshold=0.0,
                         n_best_size=20, max_answer_length=30, verbose_logging=False,
                         tune_null_threshold=False, predict_file=predict_file)
  evaluation = squad_answers.write_answers(f, True, examples, features, results, dataset,
                                           str(tmp_path))
  predictions = _load(tmp_path, "predictions.json")
  assert evaluation == _load(tmp_path, "eval_results.json")
  official = v1.evaluate(dataset["data"], predictions)
  # 4 of 5 exact: the fixture's answer "Father Julius Nieuwl" ends inside a word, and as in the
  # original the span cannot end inside a word piece, so the answer is "... Nieuwland".
  assert predictions["5733b1da4776f4190066106b"] == "Father Julius Nieuwland"
  assert evaluation["exact_match"] == pytest.approx(100 * official["exact_match"]) == 80.0
  assert evaluation["f1"] == pytest.approx(100 * official["final_f1"]) == pytest.approx(
      100 * (4 + 2 / 3) / 5)
  assert not os.path.exists(tmp_path / "null_odds.json")
