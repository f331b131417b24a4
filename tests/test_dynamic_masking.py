"""Dynamic masking (bert_tf.data.dynamic_masking, run_pretraining.py --dynamic_masking) and the unmasked
records it reads (create_pretraining_data.py --unmasked): the original's masking rule in
distribution (counts, 80/10/10 and the Table 8 mixes, specials, whole words), seeding, new masks
each epoch, exact resume, and the scripts end to end, packed or not."""

import concurrent.futures

import numpy as np
import pytest
import tensorflow as tf

from support.script_runner import run_script
from support.pretraining_runs import command, read_eval_results
from support.pretraining_runs import write_pretraining_records
from support.task_data import toy_corpus

from bert_tf.data import dynamic_masking
from bert_tf.data import records
from bert_tf.errors import BertTfError
from bert_tf.drivers import pretraining
from bert_tf.model import objectives
from bert_tf.drivers import pretraining_options

SEQ, PREDS = 32, 6
# 50 entries at most (test_run_pretraining's tiny config); "unaffable" is un ##aff ##able.
WORDS = ["the", "cat", "sat", "on", "a", "mat", "un", "run", "quick", "dog", "ran", "home", "big",
         "red", "fox", "jump", "over", "lazy", "old", "new", "."]
PIECES = ["##aff", "##able", "##ning", "##ly", "##s", "##ed"]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS + PIECES
CLS, SEP, MASK = 2, 3, 4


@pytest.fixture(scope="module")
def vocab_file(tmp_path_factory):
  path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
  path.write_text("\n".join(VOCAB) + "\n")
  return str(path)


def _unmasked_records(path, count, seed=0):
  """Unmasked records of 6 to SEQ tokens: [CLS] A [SEP] B [SEP], some pieces "##"."""
  rng = np.random.RandomState(seed)
  with records.RecordWriter(path) as writer:
    for _ in range(count):
      length = rng.randint(6, SEQ + 1)
      ids = rng.randint(5, len(VOCAB), length)
      ids[0] = CLS
      split = rng.randint(2, length - 2)
      ids[split] = ids[-1] = SEP
      padding = [0] * (SEQ - length)
      writer.write({"input_ids": ids.tolist() + padding, "input_mask": [1] * length + padding,
                    "segment_ids": [0] * (split + 1) + [1] * (length - split - 1) + padding,
                    "next_sentence_labels": [int(rng.randint(2))]})
  return path


@pytest.fixture(scope="module")
def record_file(tmp_path_factory):
  return _unmasked_records(str(tmp_path_factory.mktemp("records") / "unmasked.tfrecord"), 400)


def _masking(vocab_file, **flags):
  values = dict(max_predictions_per_seq=PREDS, masked_lm_prob=0.15, do_whole_word_mask=False,
                mask_prob_mask=0.8, mask_prob_keep=0.1, mask_prob_random=0.1, dynamic_masking=True)
  values.update(flags)
  return dynamic_masking.DynamicMasking.from_options(objectives.Masking(**values), SEQ,
                                                     vocab_file)


def _batches(record_file, masking, batches, batch_size=100, seed=1, is_training=True,
             iterator=None):
  fn = pretraining.input_fn([record_file], SEQ, PREDS, batch_size, is_training, seed=seed,
                            masking=masking)
  iterator = iterator or iter(fn(tf.distribute.InputContext()))
  return [{k: v.numpy() for k, v in next(iterator).items()} for _ in range(batches)]


def _unmask(batch):
  """The original ids of a masked batch, and the chosen positions as [B, SEQ] bool."""
  ids, chosen = batch["input_ids"].copy(), np.zeros(batch["input_ids"].shape, bool)
  for row, (positions, labels, weights) in enumerate(zip(
      batch["masked_lm_positions"], batch["masked_lm_ids"], batch["masked_lm_weights"])):
    n = int(weights.sum())
    assert np.all(weights[:n] == 1) and np.all(weights[n:] == 0)
    assert np.all(np.diff(positions[:n]) > 0) and not positions[n:].any()
    ids[row, positions[:n]] = labels[:n]
    chosen[row, positions[:n]] = True
  return ids, chosen


def test_counts_specials_and_the_80_10_10_rule(record_file, vocab_file):
  outcomes = np.zeros(3)  # [MASK], same, other
  for batch in _batches(record_file, _masking(vocab_file), 20):
    ids, chosen = _unmask(batch)
    lengths = batch["input_mask"].sum(axis=1)
    expected = [min(PREDS, max(1, int(round(n * 0.15)))) for n in lengths]
    np.testing.assert_array_equal(chosen.sum(axis=1), expected)
    assert not np.any(chosen & ((ids == CLS) | (ids == SEP) | (batch["input_mask"] == 0)))
    np.testing.assert_array_equal(batch["input_ids"][~chosen], ids[~chosen])
    became = batch["input_ids"][chosen]
    outcomes += [np.sum(became == MASK), np.sum(became == ids[chosen]),
                 np.sum((became != MASK) & (became != ids[chosen]))]
  total = outcomes.sum()
  # A random token is the same one 1 time in len(VOCAB), [MASK] another.
  same = 0.1 + 0.1 / len(VOCAB)
  for observed, p in zip(outcomes / total, [0.8 + 0.1 / len(VOCAB), same, 1 - 0.8 - same - 0.1 /
                                            len(VOCAB)]):
    assert abs(observed - p) < 5 * (p * (1 - p) / total) ** 0.5, (outcomes, total)


def test_table_8_mixes(record_file, vocab_file):
  batch = _batches(record_file, _masking(vocab_file, mask_prob_mask=0.0, mask_prob_keep=1.0,
                                         mask_prob_random=0.0), 1)[0]
  assert batch["masked_lm_weights"].sum() > 0
  np.testing.assert_array_equal(_unmask(batch)[0], batch["input_ids"])  # all kept
  batch = _batches(record_file, _masking(vocab_file, mask_prob_mask=1.0, mask_prob_keep=0.0,
                                         mask_prob_random=0.0), 1)[0]
  ids, chosen = _unmask(batch)
  assert np.all(batch["input_ids"][chosen] == MASK)
  with pytest.raises(BertTfError, match="sum to 1"):
    _masking(vocab_file, mask_prob_random=0.3)


def test_whole_words_are_masked_together(record_file, vocab_file):
  continuation = np.array([token.startswith("##") for token in VOCAB])
  counts, expected_counts = 0, 0
  for batch in _batches(record_file, _masking(vocab_file, do_whole_word_mask=True,
                                              masked_lm_prob=0.3), 5):
    ids, chosen = _unmask(batch)
    candidate = (batch["input_mask"] > 0) & (ids != CLS) & (ids != SEP)
    for row in range(len(ids)):
      # The words of the row as the original groups them (across the middle [SEP] too).
      words = []
      for position in np.flatnonzero(candidate[row]):
        if words and continuation[ids[row, position]]:
          words[-1].append(position)
        else:
          words.append([position])
      for word in words:
        assert len(set(chosen[row, word])) == 1, (ids[row], chosen[row], word)
      limit = min(PREDS, max(1, int(round(batch["input_mask"][row].sum() * 0.3))))
      total = chosen[row].sum()
      assert total <= limit
      # A word that would overflow is skipped, the next ones tried: none left would fit.
      assert all(len(word) > limit - total for word in words if not chosen[row, word[0]])
      counts += total
      expected_counts += limit
  assert counts > 0.8 * expected_counts


def test_seeded_new_each_epoch_and_evaluation_fixed(tmp_path, vocab_file):
  small = _unmasked_records(str(tmp_path / "small.tfrecord"), 50, seed=1)
  masking = _masking(vocab_file)
  first, again = (_batches(small, masking, 2, batch_size=25, seed=3) for _ in range(2))
  other_seed = _batches(small, masking, 2, batch_size=25, seed=4)
  for a, b in zip(first, again):
    for name in a:
      np.testing.assert_array_equal(a[name], b[name])
  assert not np.array_equal(first[0]["masked_lm_positions"], other_seed[0]["masked_lm_positions"])
  # 8 epochs' worth (shuffled across their bounds, so not 8 of each: with 4 epochs' worth some
  # TensorFlow global seeds left an instance drawn once): each instance several times, masked
  # anew (short ones may draw the same mask again).
  epochs = _batches(small, masking, 16, batch_size=25, seed=3)
  seen = {}
  for batch in epochs:
    for row, masked in zip(_unmask(batch)[0], batch["input_ids"]):
      seen.setdefault(tuple(row), []).append(tuple(masked))
  assert len(seen) == 50 and min(map(len, seen.values())) >= 2
  assert sum(len(set(masks)) for masks in seen.values()) > 0.8 * 400
  # Evaluation: in order, the same masks whatever the training seed.
  evals = [_batches(small, masking, 2, batch_size=25, seed=s, is_training=False) for s in (3, 4)]
  np.testing.assert_array_equal(evals[0][0]["input_ids"], evals[1][0]["input_ids"])
  np.testing.assert_array_equal(evals[0][1]["masked_lm_ids"], evals[1][1]["masked_lm_ids"])


def test_input_resumes_with_the_same_masks(record_file, vocab_file, tmp_path):
  masking = _masking(vocab_file, do_whole_word_mask=True)
  for row_limits in (None, (4, 12)):
    fn = pretraining.input_fn([record_file], SEQ, PREDS, 16, True, seed=5, row_limits=row_limits,
                              masking=masking)
    iterator = iter(fn(tf.distribute.InputContext()))
    for _ in range(3):
      next(iterator)
    path = tf.train.Checkpoint(iterator=iterator).write(str(tmp_path / "iterator"))
    straight = [next(iterator) for _ in range(4)]
    resumed_iterator = iter(fn(tf.distribute.InputContext()))
    tf.train.Checkpoint(iterator=resumed_iterator).read(path).assert_consumed()
    for a, b in zip(straight, (next(resumed_iterator) for _ in range(4))):
      for name in ("input_ids", "masked_lm_positions", "masked_lm_ids", "masked_lm_weights"):
        np.testing.assert_array_equal(a[name].numpy(), b[name].numpy())


def test_bad_flags_and_records_fail_in_one_line(record_file, vocab_file, tmp_path):
  dynamic = objectives.Masking(dynamic_masking=True)
  with pytest.raises(BertTfError, match="--dynamic_masking: needs --vocab_file"):
    pretraining_options.PretrainingOptions(input_file="in", bert_config_file="c.json",
                                           output_dir="out", do_train=True,
                                           objective=objectives.Objective(masking=dynamic))
  with pytest.raises(BertTfError, match="--left_to_right"):
    objectives.Objective(left_to_right=True, masking=dynamic)
  assert _masking(vocab_file, dynamic_masking=False) is None
  with pytest.raises(BertTfError, match="add --dynamic_masking"):
    dynamic_masking.check_records(record_file, None)
  masked = write_pretraining_records(str(tmp_path / "masked.tfrecord"), 2)
  with pytest.raises(BertTfError, match="create_pretraining_data.py --unmasked"):
    dynamic_masking.check_records(masked, _masking(vocab_file))


def _read(path):
  return [{name: list(f.int64_list.value) or list(f.float_list.value)
           for name, f in tf.train.Example.FromString(raw.numpy()).features.feature.items()}
          for raw in tf.data.TFRecordDataset(path)]


def test_scripts_end_to_end(tmp_path, vocab_file):
  corpus = toy_corpus(tmp_path, documents=40)  # its words are in VOCAB
  counts = {}
  for dupe in (1, 2):
    out = str(tmp_path / f"unmasked_{dupe}.tfrecord")
    result = run_script("create_pretraining_data.py", f"--input_file={corpus}",
                        f"--output_file={out}", f"--vocab_file={vocab_file}", "--unmasked",
                        "--max_seq_length=16", "--max_predictions_per_seq=4",
                        f"--dupe_factor={dupe}")
    assert result.returncode == 0, result.stderr[-3000:]
    written = _read(out)
    counts[dupe] = len(written)
    assert sorted(written[0]) == ["input_ids", "input_mask", "next_sentence_labels",
                                  "segment_ids"]
    assert not any(MASK in record["input_ids"] for record in written)
  # Each pass over the documents makes its own instances (random lengths and next sentences).
  assert counts[1] > 20 and 1.7 * counts[1] < counts[2] < 2.3 * counts[1]

  records_ = str(tmp_path / "unmasked_1.tfrecord")
  flags = ["--dynamic_masking", f"--vocab_file={vocab_file}", "--do_whole_word_mask"]
  # Both runs forked from the script runner's server (TensorFlow imported once), side by side.
  runs = {name: ["--do_train", "--do_eval", "--num_train_steps=2", *extra]
          for name, extra in [("plain", []), ("packed", ["--pack_sequences", "--no_nsp"])]}
  with concurrent.futures.ThreadPoolExecutor(len(runs)) as pool:
    done = {name: pool.submit(run_script, *command(tmp_path, str(tmp_path / name), *flags, *extra,
                                                   records=records_)[1:], timeout=240)
            for name, extra in runs.items()}
  for name, future in done.items():
    result = future.result()
    assert result.returncode == 0, (name, (result.stdout + result.stderr)[-3000:])
    assert 0 <= float(read_eval_results(str(tmp_path / name))["masked_lm_accuracy"]) <= 1
