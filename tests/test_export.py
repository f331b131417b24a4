"""Raw-text SavedModels (bert_tf/serving/export.py, export_savedmodel.py): reloaded in a fresh process,
their outputs equal the Python predict paths of run_classifier / run_squad / run_ner on real
examples (tiny randomly initialised models saved as fine-tuned checkpoints), and bad input."""
import json
import os
import random
import re
import subprocess
import sys

from absl import flags
import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from bert_tf.errors import BertTfError
from bert_tf.drivers import finetune_options
from bert_tf.drivers import exporting
from bert_tf.serving import export
from bert_tf.tasks import conll
from bert_tf.tasks import glue
from bert_tf.tasks import glue_server
from bert_tf.tasks import squad
from bert_tf.tasks import squad_answers
from bert_tf.tasks import squad_server
from bert_tf.text import fast_tokenization
from bert_tf.text import tokenization
from support.paths import shared_data
from support.script_runner import run_script
from support.exports import model_inputs, tiny_config, vocab_path

flags.FLAGS.mark_as_parsed()

CLASSIFIER_SEQ = 64
SQUAD_SEQ = 384
NER_SEQ = 128
# Odd text for the in-graph tokenization and truncation: empty, whitespace only, accents, CJK,
# control and NUL characters, a word the vocab cannot spell, and texts far over max_seq_length.
ODD_TEXTS = ["", "   ", "Héllo, WORLD!! naïve café", "中文字符 and \u00a0nbsp\tTab\x00nul",
             "\u2603\u2603 snowmen", "word " * 400, "x" * 300]

LOADER = r"""
import json, os, sys
os.environ["TF_USE_LEGACY_KERAS"] = "1"
import tensorflow as tf
import tensorflow_text  # registers the tokenizer ops the SavedModels use
requests = json.load(open(sys.argv[1]))
results = {}
for name, (export_dir, signature, inputs) in requests.items():
  fn = tf.saved_model.load(export_dir).signatures[signature]
  outputs = fn(**{k: tf.constant(v, tf.string) for k, v in inputs.items()})
  results[name] = {k: v.numpy().tolist() for k, v in outputs.items()}
json.dump(results, open(sys.argv[2], "w"), default=lambda b: b.decode("utf-8", "replace"))
"""


def save_model(model, directory):
  tf.train.Checkpoint(model=model).save(os.path.join(directory, "ckpt"))
  return directory


def run_in_fresh_process(requests, tmp_path):
  """{name: (export_dir, signature, inputs)} -> {name: outputs as lists}, from a new Python."""
  request_file, result_file = tmp_path / "requests.json", tmp_path / "results.json"
  request_file.write_text(json.dumps(requests))
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
  done = subprocess.run([sys.executable, "-c", LOADER, str(request_file), str(result_file)],
                        env=env, capture_output=True, text=True, timeout=300)
  assert done.returncode == 0, done.stderr[-3000:]
  return json.loads(result_file.read_text())


def run_export(*args):
  return run_script("export_savedmodel.py", *args, timeout=300)


def squad_questions(path):
  """(qas_id, question, context) of every question of a SQuAD file."""
  with open(path, encoding="utf-8") as f:
    data = json.load(f)["data"]
  return [(qa["id"], qa["question"], p["context"])
          for article in data for p in article["paragraphs"] for qa in p["qas"]]


def python_squad(model, vocab, questions, n_best_size, v2):
  """run_squad's path: features, logits and squad.postprocess -> (best non-null, null odds)."""
  tokenizer = tokenization.FullTokenizer(vocab)
  examples = []
  for qas_id, question, context in questions:
    doc_tokens, _ = squad.split_context(context)
    examples.append(squad.SquadExample(qas_id, question, doc_tokens, None, None, None, False))
  features = squad.convert_examples_to_features(examples, tokenizer, SQUAD_SEQ, 128, 64, False)
  assert len(features) == len(examples), "every test context fits in one window"
  outputs = model(model_inputs(features))
  results = [squad_answers.RawResult(f.unique_id, s, e) for f, s, e in zip(
      features, outputs["start_logits"].numpy(), outputs["end_logits"].numpy())]
  predictions, _, null_odds, best_non_null = squad_answers.postprocess(
      examples, features, results, n_best_size, 30, True, version_2_with_negative=True)
  return predictions, null_odds, best_non_null, features


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
  """Three tiny task models, saved as checkpoints and exported (NER through the script)."""
  tmp = tmp_path_factory.mktemp("export")
  # Keras' own seed too: tf.random.set_seed alone leaves the initializers' draws to whatever ran
  # before in this process (which the test files each pytest-xdist worker takes decide), and the
  # SQuAD checks below need a model that answers at least half of the questions.
  tf_keras.utils.set_random_seed(1)
  uncased = tiny_config(30522)
  models, dirs = {}, {}

  models["classifier"] = export.build_model("classifier", uncased, num_labels=2)
  save_model(models["classifier"], str(tmp / "mrpc"))
  dirs["classifier"] = export.export(
      "classifier", uncased, vocab_path(), True, str(tmp / "mrpc"), str(tmp / "mrpc_export"),
      CLASSIFIER_SEQ, label_list=["0", "1"], pair=True)

  models["squad"] = export.build_model("squad", uncased)
  save_model(models["squad"], str(tmp / "squad"))
  # Two exports into one export_dir that already holds a run's files (what
  # test_export_adds_a_version... checks they left as they were): SQuAD's, and NER's through the
  # script. SQuAD with n_best_size 0 (every span) against run_squad's search over all
  # max_seq_length logits; the default 20 (the same graph, another setting) is served in memory.
  shared_dir = tmp / "run"
  shared_dir.mkdir()
  (shared_dir / "eval_results.txt").write_text("eval_accuracy = 0.5\n")
  (shared_dir / "123").mkdir()  # a numbered directory that is not a SavedModel
  run_files = {p: p.read_bytes() for p in shared_dir.rglob("*") if p.is_file()}
  dirs["squad0"] = export.export("squad", uncased, vocab_path(), True, str(tmp / "squad"),
                                 str(shared_dir), SQUAD_SEQ, n_best_size=0,
                                 null_score_diff_threshold=0.0)
  squad20 = export.build_server("squad", uncased, vocab_path(), True, str(tmp / "squad"),
                                SQUAD_SEQ, n_best_size=20, null_score_diff_threshold=0.0)

  sentences = conll.read_conll(os.path.join(shared_data("conll2003"), "valid.txt"))[:60]
  labels = conll.get_labels(sentences)
  cased = tiny_config(28996)
  models["ner"] = export.build_model("ner", cased, num_labels=len(labels))
  ner_dir = save_model(models["ner"], str(tmp / "ner"))
  (tmp / "ner" / "label_list.txt").write_text("".join(label + "\n" for label in labels))
  config_file = tmp / "cased_config.json"
  cased.to_json_file(str(config_file))
  done = run_export("--task=ner", f"--bert_config_file={config_file}",
                    f"--vocab_file={vocab_path(cased=True)}", "--do_lower_case=False",
                    f"--init_checkpoint={ner_dir}", f"--max_seq_length={NER_SEQ}",
                    f"--export_dir={shared_dir}")
  assert done.returncode == 0, done.stderr[-3000:]
  dirs["ner"] = export.resolve(str(shared_dir))
  assert dirs["ner"] == os.path.join(shared_dir, str(export.versions(str(shared_dir))[-1]))
  return dict(tmp=tmp, models=models, dirs=dirs, sentences=sentences, labels=labels,
              squad20=squad20, shared_dir=shared_dir, run_files=run_files)


def as_lists(outputs):
  """A signature's outputs as run_in_fresh_process gives them: lists, strings decoded."""
  return json.loads(json.dumps({k: v.numpy().tolist() for k, v in outputs.items()},
                               default=lambda b: b.decode("utf-8", "replace")))


def check_ner_served(results, exported, sentences):
  """The NER export's words and tags, served in a fresh process, are run_ner's."""
  # run_ner's windows and first-sub-token tags; sentences that fit in one window.
  ner_tokenizer = tokenization.FullTokenizer(vocab_path(cased=True), do_lower_case=False)
  labels = exported["labels"]
  features = conll.convert_sentences_to_features(sentences, labels, NER_SEQ, ner_tokenizer)
  assert len(features) == len(sentences)
  model = exported["models"]["ner"]
  predicted = model(model_inputs(features))["logits"].numpy().argmax(-1)
  tags = conll.predictions_to_tags(sentences, features, predicted, labels)
  served = results["ner"]
  assert results["ner_ids"]["input_ids"][:len(sentences)] == [f.input_ids for f in features]
  for i, sentence in enumerate(sentences):
    n = served["num_words"][i]
    assert served["words"][i][:n] == sentence.words
    assert served["tags"][i][:n] == tags[i]
  # Odd texts, one far over a window: str.split() words, each tagged as run_ner tags it.
  odd = [conll.Sentence(t.split(), ["O"] * len(t.split()), [], [], []) for t in ODD_TEXTS]
  odd_features = conll.convert_sentences_to_features(odd, labels, NER_SEQ, ner_tokenizer)
  assert len(odd_features) > len(odd)
  odd_tags = conll.predictions_to_tags(
      odd, odd_features, model(model_inputs(odd_features))["logits"].numpy().argmax(-1),
      labels)
  for text, n, words, row, expected in zip(ODD_TEXTS, served["num_words"][len(sentences):],
                                           served["words"][len(sentences):],
                                           served["tags"][len(sentences):], odd_tags):
    assert words[:n] == text.split()
    assert row[:n] == expected


def test_saved_models_in_fresh_process_match_python_paths(exported, tmp_path):
  models, dirs = exported["models"], exported["dirs"]
  mrpc = glue.get_processor("mrpc").get_dev_examples(shared_data("glue", "MRPC"))[:24]
  text_a = [e.text_a for e in mrpc] + ODD_TEXTS
  text_b = [e.text_b for e in mrpc] + ODD_TEXTS[::-1]
  questions = (squad_questions(os.path.join(shared_data("squad"), "dev-v2.0.subset.json")) +
               squad_questions(os.path.join(shared_data("squad"), "allennlp-squad-v1-style.json")))
  sentences = exported["sentences"]
  classifier_inputs = {"text_a": text_a, "text_b": text_b}
  long_question = " ".join(q for _, q, _ in questions[:8])  # over max_query_length
  long_context = " ".join(sorted({c for _, _, c in questions}))  # over one window
  squad_inputs = {"question": [q for _, q, _ in questions] + [long_question, "what?", ""],
                  "context": [c for _, _, c in questions] + [long_context, "", ""]}
  ner_inputs = {"text": [" ".join(s.words) for s in sentences] + ODD_TEXTS}
  results = run_in_fresh_process({
      "classifier": (dirs["classifier"], "serving_default", classifier_inputs),
      "classifier_ids": (dirs["classifier"], "tokenize", classifier_inputs),
      "squad0": (dirs["squad0"], "serving_default", squad_inputs),
      "squad_ids": (dirs["squad0"], "tokenize", squad_inputs),
      "ner": (dirs["ner"], "serving_default", ner_inputs),
      "ner_ids": (dirs["ner"], "tokenize", ner_inputs),
  }, tmp_path)
  results["squad20"] = as_lists(exported["squad20"].serve(
      **{k: tf.constant(v, tf.string) for k, v in squad_inputs.items()}))

  # Classifier: run_classifier's features (FullTokenizer, its truncation), logits -> softmax.
  tokenizer = tokenization.FullTokenizer(vocab_path())
  examples = [glue.InputExample(str(i), a, b, "0") for i, (a, b) in enumerate(zip(text_a, text_b))]
  features = [glue.convert_single_example(9, e, ["0", "1"], CLASSIFIER_SEQ, tokenizer)
              for e in examples]
  ids = results["classifier_ids"]
  assert ids["input_ids"] == [f.input_ids for f in features]
  assert ids["segment_ids"] == [f.segment_ids for f in features]
  assert ids["input_mask"] == [f.input_mask for f in features]
  probabilities = tf.nn.softmax(models["classifier"](model_inputs(features))["logits"]).numpy()
  served = np.array(results["classifier"]["probabilities"])
  np.testing.assert_allclose(served, probabilities, atol=1e-5)
  assert results["classifier"]["labels"] == [str(i) for i in probabilities.argmax(-1)]
  assert np.all(np.isfinite(served))

  # SQuAD: run_squad's features and post-processing; answers compared with whitespace collapsed.
  real = questions  # the real questions, before the long and empty ones
  for n_best_size, name in ((SQUAD_SEQ, "squad0"), (20, "squad20")):
    predictions, null_odds, best_non_null, features = python_squad(
        models["squad"], vocab_path(), real, n_best_size, v2=True)
    if name == "squad0":
      assert results["squad_ids"]["input_ids"][:len(real)] == [f.input_ids for f in features]
      assert results["squad_ids"]["segment_ids"][:len(real)] == [f.segment_ids for f in features]
    served = results[name]
    for i, (qas_id, _, _) in enumerate(real):
      assert served["null_score_diff"][i] == pytest.approx(null_odds[qas_id], abs=1e-4)
      assert served["has_answer"][i] == (predictions[qas_id] != "")
      if served["has_answer"][i]:
        assert " ".join(served["answer"][i].split()) == " ".join(best_non_null[qas_id].split())
    # Too long: the question cut to max_query_length; the context's first window is run_squad's.
    tokenizer = tokenization.FullTokenizer(vocab_path())
    doc_tokens, _ = squad.split_context(long_context)
    first_window = squad.convert_examples_to_features(
        [squad.SquadExample("long", long_question, doc_tokens, None, None, None, False)],
        tokenizer, SQUAD_SEQ, 128, 64, False)[0]
    assert len(tokenizer.tokenize(long_question)) > 64
    assert results["squad_ids"]["input_ids"][len(real)] == first_window.input_ids
    assert np.isfinite(served["score"][len(real)])
    # An empty context has no span: no answer, never an error.
    assert served["has_answer"][-2:] == [False, False]
    assert served["answer"][-2:] == ["", ""]
  assert sum(results["squad0"]["has_answer"]) >= len(real) // 2  # the comparison is not vacuous

  check_ner_served(results, exported, sentences)


def test_export_holds_the_serving_functions_and_variables_not_the_keras_layers(exported):
  """The server keeps its Keras model out of the SavedModel (text_server): no Keras layer objects
  or traces of their call functions are saved, only the variables the serving functions read,
  which a load restores (their names and values) and serves the in-memory server's outputs with."""
  for name in ("classifier", "squad0", "ner"):
    with open(os.path.join(exported["dirs"][name], "saved_model.pb"), "rb") as f:
      graph = f.read()
    assert b"keras_api" not in graph and b"_tf_keras" not in graph, name
  loaded = tf.saved_model.load(exported["dirs"]["classifier"])
  assert not hasattr(loaded, "model")
  model = exported["models"]["classifier"]
  assert [v.name for v in loaded.model_variables] == [v.name for v in model.variables]
  for restored, variable in zip(loaded.model_variables, model.variables):
    np.testing.assert_array_equal(restored.numpy(), variable.numpy())
  server = export.make_server("classifier", fast_tokenization.FastTokenizer(vocab_path()), model,
                              CLASSIFIER_SEQ, label_list=["0", "1"], pair=True)
  assert [id(v) for v in server.model_variables] == [id(v) for v in server.model.variables]
  texts = {"text_a": tf.constant(ODD_TEXTS), "text_b": tf.constant(ODD_TEXTS[::-1])}
  served, expected = loaded.signatures["serving_default"](**texts), server.serve(**texts)
  np.testing.assert_array_equal(served["probabilities"].numpy(),
                                expected["probabilities"].numpy())


def test_bfloat16_export_gives_the_mixed_precision_outputs(exported, tmp_path):
  """--dtype=bfloat16 stores the matmul weights in bfloat16: what mixed_bfloat16 computes."""
  import tf_keras  # pylint: disable=g-import-not-at-top
  uncased = tiny_config(30522)
  export_dir = export.export("classifier", uncased, vocab_path(), True,
                             str(exported["tmp"] / "mrpc"), str(tmp_path / "bf16"),
                             CLASSIFIER_SEQ, label_list=["0", "1"], dtype="bfloat16")
  mrpc = glue.get_processor("mrpc").get_dev_examples(shared_data("glue", "MRPC"))[:8]
  served = export.load(export_dir).signatures["serving_default"](
      text_a=tf.constant([e.text_a for e in mrpc]), text_b=tf.constant([e.text_b for e in mrpc]))
  tf_keras.mixed_precision.set_global_policy("mixed_bfloat16")
  try:
    mixed = export.build_model("classifier", uncased, num_labels=2)
  finally:
    tf_keras.mixed_precision.set_global_policy("float32")
  mixed.set_weights(exported["models"]["classifier"].get_weights())
  tokenizer = tokenization.FullTokenizer(vocab_path())
  features = [glue.convert_single_example(9, e, ["0", "1"], CLASSIFIER_SEQ, tokenizer)
              for e in mrpc]
  expected = tf.nn.softmax(mixed(model_inputs(features))["logits"]).numpy()
  np.testing.assert_allclose(served["probabilities"].numpy(), expected, atol=2e-3)


def test_single_text_and_regression_servers():
  """In process (not saved): a one-text task's signature, and STS-B's scores."""
  assert glue.classifier_labels("sst-2") == (["0", "1"], False)
  assert glue.classifier_labels("sts-b") == (None, True)
  config = tiny_config(30522)
  tokenizer = tokenization.FullTokenizer(vocab_path())
  fast = fast_tokenization.FastTokenizer(vocab_path())
  texts = ["a gorgeous, witty, seductive movie.", "", "dull " * 100]
  features = [glue.convert_single_example(9, glue.InputExample(str(i), t, None, "0"),
                                          ["0", "1"], CLASSIFIER_SEQ, tokenizer)
              for i, t in enumerate(texts)]
  single = glue_server.ClassifierServer(fast, export.build_model("classifier", config, 2),
                                        CLASSIFIER_SEQ, ["0", "1"], pair=False)
  ids = single.tokenize(tf.constant(texts))
  assert ids["input_ids"].numpy().tolist() == [f.input_ids for f in features]
  expected = tf.nn.softmax(single.model(model_inputs(features))["logits"]).numpy()
  np.testing.assert_allclose(single.serve(tf.constant(texts))["probabilities"].numpy(), expected,
                             atol=1e-5)
  regressor = export.build_model("classifier", config, 1)
  server = glue_server.ClassifierServer(fast, regressor, CLASSIFIER_SEQ, None, pair=True,
                                        regression=True)
  scores = server.serve(tf.constant(texts), tf.constant(texts[::-1]))["scores"].numpy()
  assert scores.shape == (3,) and np.all(np.isfinite(scores))


class SpanStub:
  """A stand-in span model whose logits pick a chosen (start, end) position per example."""

  def __init__(self, seq_length):
    self.seq_length = seq_length
    self.starts = tf.Variable(tf.zeros([0], tf.int32), shape=[None])
    self.ends = tf.Variable(tf.zeros([0], tf.int32), shape=[None])

  def __call__(self, inputs, training=False):
    return {"start_logits": tf.one_hot(self.starts, self.seq_length) * 10.0,
            "end_logits": tf.one_hot(self.ends, self.seq_length) * 10.0}


def test_squad_answer_text_from_raw_context_matches_get_final_text():
  """Random spans over real and odd contexts: the in-graph text cut from the raw context equals
  run_squad's get_final_text, whitespace collapsed, except where the docstring says it differs."""
  vocab = vocab_path()
  tokenizer = tokenization.FullTokenizer(vocab)
  questions = squad_questions(os.path.join(shared_data("squad"), "dev-v2.0.subset.json"))
  odd = ["The (1895-1943). Émile ZOLA's café—Paris, 2,000 km²!", "tab\tnew\nline  twice  ok",
         "naïve Ñandú résumé: coöperate, façade; ÅNGSTRÖM's 中文 mixed-case WORDS.",
         "\u2603snow\u2603man and fine, plain words after",
         "\x01 words with no piece \u200b between \x00 and after \x01"]
  contexts = sorted({c for _, _, c in questions})[:3] + odd
  stub = SpanStub(SQUAD_SEQ)
  server = squad_server.SquadServer(fast_tokenization.FastTokenizer(vocab), stub, SQUAD_SEQ,
                                    n_best_size=0, max_answer_length=SQUAD_SEQ)
  rng = random.Random(3)
  checked, unk_spans, first_occurrence = 0, 0, 0
  tok_text = lambda text: " ".join(tokenization.BasicTokenizer(True).tokenize(text))  # noqa: E731
  for context in contexts:
    doc_tokens, _ = squad.split_context(context)
    example = squad.SquadExample("q", "which?", doc_tokens, None, None, None, False)
    feature = squad.convert_examples_to_features([example], tokenizer, SQUAD_SEQ, 128, 64,
                                                 False)[0]
    positions = sorted(feature.token_to_orig_map)
    spans = [(p, p) for p in positions] + [
        tuple(sorted(rng.sample(positions, 2))) for _ in range(40)]
    stub.starts.assign([s for s, _ in spans])
    stub.ends.assign([e for _, e in spans])
    served = server.serve(tf.constant(["which?"] * len(spans)),
                          tf.constant([context] * len(spans)))
    for (start, end), answer in zip(spans, served["answer"].numpy()):
      pieces = feature.tokens[start:end + 1]
      if "[UNK]" in pieces:  # documented: run_squad returns the whole words there
        unk_spans += 1
        continue
      pred_text = " ".join(" ".join(pieces).replace(" ##", "").replace("##", "").split())
      orig = " ".join(doc_tokens[feature.token_to_orig_map[start]:
                                 feature.token_to_orig_map[end] + 1])
      expected = squad_answers.get_final_text(pred_text, orig, True)
      got = " ".join(answer.decode("utf-8").split())
      if got != expected:
        # Documented: get_final_text takes the first occurrence of the predicted text in the
        # words; that one differs from the right one in case or accents only.
        assert tok_text(orig).count(pred_text) > 1 and tok_text(got) == tok_text(expected), (
            context, start, end, got, expected)
        first_occurrence += 1
      checked += 1
  assert checked > 300 and unk_spans > 0 and first_occurrence < checked // 50


def test_bad_input(exported, tmp_path):
  tmp, models = exported["tmp"], exported["models"]
  uncased = tiny_config(30522)
  # A checkpoint without the task head: the classifier's for SQuAD; an encoder-only one.
  with pytest.raises(BertTfError, match="has no squad head.*cls/squad/output_weights"):
    export.export("squad", uncased, vocab_path(), True, str(tmp / "mrpc"), str(tmp_path / "x"),
                  128)
  save_model(models["classifier"].encoder, str(tmp_path / "encoder"))
  with pytest.raises(BertTfError, match="has no glue head"):
    export.export("classifier", uncased, vocab_path(), True, str(tmp_path / "encoder"),
                  str(tmp_path / "x"), 128, label_list=["0", "1"])
  # Another label count than the checkpoint's head.
  with pytest.raises(BertTfError, match=r"output_weights has shape \[2, 32\].*\[3, 32\]"):
    export.export("classifier", uncased, vocab_path(), True, str(tmp / "mrpc"),
                  str(tmp_path / "x"), 128, label_list=["a", "b", "c"])
  # A vocab that is not the model's.
  with pytest.raises(BertTfError, match="28996 tokens but the model's vocab_size is 30522"):
    export.export("classifier", uncased, vocab_path(cased=True), False, str(tmp / "mrpc"),
                  str(tmp_path / "x"), 128, label_list=["0", "1"])
  with pytest.raises(BertTfError, match="holds no checkpoint"):
    export.export("classifier", uncased, vocab_path(), True, str(tmp_path), str(tmp_path / "x"),
                  128, label_list=["0", "1"])
  assert not os.path.exists(tmp_path / "x")
  # The script: one `error:` line and exit status 1.
  config_file = tmp_path / "config.json"
  uncased.to_json_file(str(config_file))
  done = run_export("--task=classifier", "--task_name=mrpc", f"--bert_config_file={config_file}",
                    f"--vocab_file={vocab_path(cased=True)}", "--do_lower_case=False",
                    f"--init_checkpoint={tmp / 'mrpc'}", f"--export_dir={tmp_path / 'y'}")
  assert done.returncode == 1
  assert done.stderr.strip().splitlines()[-1].startswith("error: --vocab_file: ")
  assert not os.path.exists(tmp_path / "y")


def test_export_checks_max_seq_length_against_the_model_first(tmp_path):
  config = tiny_config(100)
  config.to_json_file(str(tmp_path / "bert_config.json"))
  too_long = config.max_position_embeddings + 1
  for length, message in [(4, "expected an integer of at least 5"),
                          (too_long, f"cannot use sequence length {too_long} because")]:
    with pytest.raises(BertTfError, match=re.escape(f"--max_seq_length: {message}")):
      exporting.run(glue.GlueTask, finetune_options.ExportOptions(
          bert_config_file=str(tmp_path / "bert_config.json"),
          vocab_file=str(tmp_path / "vocab.txt"), init_checkpoint=str(tmp_path / "model.ckpt-1"),
          export_dir=str(tmp_path / "x"), max_seq_length=length,
          task=glue.GlueOptions(task_name="mrpc")))
  assert not os.path.exists(tmp_path / "x")


def test_export_adds_a_version_and_never_touches_what_the_directory_holds(exported, tmp_path):
  """export_dir gets a new numbered version at each export (TF Serving's layout); the files
  already there (here a run's output_dir: checkpoints, records, results) stay as they were. The
  fixture's SQuAD export and NER export (by the script), made into one such directory."""
  target, before = exported["shared_dir"], exported["run_files"]
  first, second = exported["dirs"]["squad0"], exported["dirs"]["ner"]
  assert os.path.dirname(first) == os.path.dirname(second) == str(target)
  assert int(os.path.basename(second)) > int(os.path.basename(first))
  assert export.versions(str(target)) == [int(os.path.basename(first)),
                                          int(os.path.basename(second))]
  assert export.resolve(str(target)) == second
  assert before and {p: p.read_bytes() for p in before} == before
  assert sorted(os.listdir(target)) == sorted(
      ["123", "eval_results.txt", os.path.basename(first), os.path.basename(second)])
  # A file where the directory should be is an error, and stays as it was.
  uncased = tiny_config(30522)
  blocker = tmp_path / "file"
  blocker.write_text("mine")
  with pytest.raises(BertTfError, match="--export_dir: .* is a file, not a directory"):
    export.export("classifier", uncased, vocab_path(), True, str(exported["tmp"] / "mrpc"),
                  str(blocker), CLASSIFIER_SEQ, label_list=["0", "1"], pair=True)
  assert blocker.read_text() == "mine"
  with pytest.raises(BertTfError, match="holds no SavedModel"):
    export.resolve(str(tmp_path))
