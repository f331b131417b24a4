"""Dynamic masking (run_pretraining.py --dynamic_masking): the masked-LM predictions drawn at input
time, fresh each time an instance is read, as RoBERTa and Model Garden's pretraining dataloader do,
from records of create_pretraining_data.py --unmasked (records.unmasked_pretraining_features).

The draw is the original create_masked_lm_predictions' (bert_tf.data.pretraining_data.algorithm.InstanceMaker),
in distribution:
  * the candidates are the real tokens but [CLS] and [SEP]; with --do_whole_word_mask a "##" piece
    joins the word before it (across the middle [SEP] too, as the original);
  * num_to_predict = min(--max_predictions_per_seq, max(1, round(tokens * --masked_lm_prob))),
    tokens counting [CLS] and [SEP], rounding halves to even (Python 3's round);
  * the candidate words in a uniformly random order, each taken unless it would overflow
    num_to_predict, until num_to_predict are taken (whole words: sometimes fewer);
  * each chosen token becomes [MASK] with --mask_prob_mask, else stays itself with
    --mask_prob_keep / (--mask_prob_keep + --mask_prob_random), else a token drawn uniformly from
    the vocab file's entries.
The positions are sorted, padded to --max_predictions_per_seq with weight 0.

Every random number is a stateless function of (seed, the record's number in the stream read:
records.records_input_fn's numbered_map_fn): no random state outside the tf.data iterator, so the
same seed gives the same masks, each epoch (each repeat of the files) has new ones, and a
checkpointed iterator resumes with exactly the masks it would have drawn. Training is seeded by
--seed; evaluation by EVAL_SEED, fixed, and reads the records in order from the first, so every
evaluation of every run (whatever its --seed) scores the same masked instances, as with masked
records. The draws are made per record, the masking per batch (vectorized over its rows), before
--pack_sequences packs the instances.
"""
from google.protobuf import message as protobuf_message
import tensorflow as tf

from bert_tf.data.pretraining_data.algorithm import Vocab
from bert_tf.data import records
from bert_tf.errors import BertTfError
from bert_tf.model import objectives
from bert_tf.text import tokenization

EVAL_SEED = 20181011  # the paper's arXiv date: the masks of every evaluation
_DRAWS = "dynamic_masking_draws"  # per token: word order, [MASK] coin, keep coin
_RANDOM_IDS = "dynamic_masking_random_ids"  # per token: an index into the vocab's entries


class DynamicMasking:
  """The masking of one run: from_options(masking, ...) reads the vocabulary; numbered_map_fn(seed)
  and batch_map_fn are records.records_input_fn's hooks."""

  def __init__(self, vocab, masking, max_seq_length):
    self.masking, self.max_seq_length = masking, max_seq_length
    self.cls_id, self.sep_id, self.mask_id = vocab.cls_id, vocab.sep_id, vocab.mask_id
    self.word_ids = tf.constant(vocab.word_ids, tf.int32)
    self.is_continuation = tf.constant(vocab.is_continuation)

  @classmethod
  def from_options(cls, masking, max_seq_length, vocab_file, config_vocab_size=None):
    """The masking a bert_tf.model.objectives.Masking asks for (its rules checked as it was made),
    or None unless dynamic; vocab_file: the records' vocabulary."""
    if not masking.dynamic_masking:
      return None
    vocab = Vocab(tokenization.load_vocab(vocab_file), "--vocab_file")
    if config_vocab_size is not None and vocab.size > config_vocab_size:
      raise BertTfError(f"--vocab_file: {vocab.size} ids but the model's vocab_size "
                        f"(--bert_config_file) is {config_vocab_size}")
    return cls(vocab, masking, max_seq_length)

  def schema(self):
    return records.unmasked_pretraining_features(self.max_seq_length)

  def numbered_map_fn(self, seed):
    """Adds the random numbers of a record, drawn from (seed, its number)."""

    def add_draws(number, features):
      seq_length = features["input_ids"].shape[0]
      key = tf.stack([tf.constant(seed, tf.int64), tf.cast(number, tf.int64)])
      features = dict(features)
      features[_DRAWS] = tf.random.stateless_uniform([seq_length, 3], key)
      features[_RANDOM_IDS] = tf.random.stateless_uniform(
          [seq_length], tf.random.experimental.stateless_fold_in(key, 1), 0,
          self.word_ids.shape[0], tf.int32)
      return features

    return add_draws

  def batch_map_fn(self, features):
    """Masks a batch of records (with their draws): input_ids masked, masked_lm_* added."""
    features = dict(features)
    draws, random_ids = features.pop(_DRAWS), features.pop(_RANDOM_IDS)
    ids = features["input_ids"]
    real = features["input_mask"] > 0
    candidate = real & (ids != self.cls_id) & (ids != self.sep_id)
    chosen = self._choose(ids, candidate, self._num_to_predict(real), draws[..., 0])
    replacement = tf.where(draws[..., 1] < self.masking.mask_prob_mask, self.mask_id,
                           tf.where(draws[..., 2] < self.masking.keep_given_not_mask, ids,
                                    tf.gather(self.word_ids, random_ids)))
    features["input_ids"] = tf.where(chosen, replacement, ids)
    features.update(_predictions(ids, chosen, self.masking.max_predictions_per_seq))
    return features

  def _num_to_predict(self, real):
    """The original's min(max_predictions_per_seq, max(1, round(len(tokens) * prob))) per row."""
    tokens = tf.reduce_sum(tf.cast(real, tf.float64), axis=1)
    count = tf.cast(tf.round(tokens * self.masking.masked_lm_prob), tf.int32)  # halves to even,
    return tf.minimum(self.masking.max_predictions_per_seq, tf.maximum(1, count))  # as Python 3

  def _choose(self, ids, candidate, num_to_predict, scores):
    """[B, S] bool: the tokens chosen, whole candidate words in the order of their first piece's
    score, each unless it would overflow num_to_predict."""
    if self.masking.do_whole_word_mask:
      continues = tf.gather(self.is_continuation, ids) & candidate
      first = tf.cumsum(tf.cast(candidate, tf.int32), axis=1) == 1
      starts = candidate & (~continues | first)
    else:
      starts = candidate
    word = tf.cumsum(tf.cast(starts, tf.int32), axis=1) * tf.cast(candidate, tf.int32)
    batch, seq_length = tf.shape(ids)[0], ids.shape[1]
    # One segment per (row, word), 0 for the tokens that are no candidate.
    segment = word + tf.range(batch)[:, tf.newaxis] * (seq_length + 1)
    num_segments = batch * (seq_length + 1)
    word_sizes = tf.math.unsorted_segment_sum(tf.cast(candidate, tf.int32), segment, num_segments)
    sizes = tf.gather(word_sizes, segment) * tf.cast(starts, tf.int32)  # at each word's start
    order = tf.argsort(tf.where(starts, scores, 2.0), axis=1, stable=True)
    sizes_in_order = tf.gather(sizes, order, batch_dims=1)
    if self.masking.do_whole_word_mask:
      taken = _greedy(sizes_in_order, num_to_predict)
    else:  # words of one piece: the first num_to_predict
      taken = (sizes_in_order > 0) & (tf.range(seq_length)[tf.newaxis] < num_to_predict[:, None])
    taken_starts = tf.gather(taken, tf.argsort(order, axis=1), batch_dims=1)
    taken_words = tf.math.unsorted_segment_max(tf.cast(taken_starts, tf.int32), segment,
                                               num_segments)
    return candidate & (tf.gather(taken_words, segment) > 0)


def _greedy(sizes, limit):
  """[B, S] bool: going along each row, take a size if the total stays <= limit (the original's
  whole-word loop: a word that would overflow is skipped, the next ones still tried)."""
  seq_length = sizes.shape[1]
  columns = tf.range(seq_length)

  def keep_going(i, total, taken):
    return (i < seq_length) & tf.reduce_any(total < limit)

  def step(i, total, taken):
    size = sizes[:, i]
    take = (size > 0) & (total + size <= limit)
    total += tf.where(take, size, 0)
    return i + 1, total, taken | (take[:, tf.newaxis] & (columns == i)[tf.newaxis])

  _, _, taken = tf.while_loop(keep_going, step, (tf.constant(0), tf.zeros_like(limit),
                                                 tf.zeros_like(sizes, tf.bool)))
  return taken


def _predictions(ids, chosen, max_predictions):
  """masked_lm_positions/ids/weights [B, max_predictions]: the chosen positions in order, their
  original ids, weight 1; then padding (0, 0, 0.0)."""
  seq_length = ids.shape[1]
  positions = tf.range(seq_length)[tf.newaxis]
  # Chosen positions first, in order; then the others (beyond seq_length).
  key = tf.sort(tf.where(chosen, positions, positions + seq_length), axis=1)
  if max_predictions > seq_length:
    key = tf.pad(key, [[0, 0], [0, max_predictions - seq_length]],
                 constant_values=2 * seq_length)
  key = key[:, :max_predictions]
  real = key < seq_length
  masked_positions = tf.where(real, key, 0)
  labels = tf.where(real, tf.gather(ids, masked_positions, batch_dims=1), 0)
  return {objectives.MASKED_LM_POSITIONS: masked_positions, objectives.MASKED_LM_IDS: labels,
          objectives.MASKED_LM_WEIGHTS: tf.cast(real, tf.float32)}


def records_arguments(masking, max_seq_length, max_predictions_per_seq, is_training, seed):
  """records.records_input_fn's schema of pretraining records and, with a DynamicMasking, its
  hooks (seeded by `seed` for training, by EVAL_SEED for evaluation)."""
  if masking is None:
    return {"name_to_features": records.pretraining_features(max_seq_length,
                                                             max_predictions_per_seq)}
  return {"name_to_features": masking.schema(), "batch_map_fn": masking.batch_map_fn,
          "numbered_map_fn": masking.numbered_map_fn(seed if is_training else EVAL_SEED)}


def check_records(path, masking):
  """A clear error when the records of `path` are masked pretraining records and --dynamic_masking
  is asked, or unmasked ones and it is not. Other records (corrupt, of another kind) are left to
  records.check_record_shapes, which says what is wrong with them."""
  try:
    first = next(iter(tf.data.TFRecordDataset(path).take(1)), None)
    features = tf.train.Example.FromString(first.numpy()).features.feature if first else {}
  except (tf.errors.OpError, protobuf_message.DecodeError):  # not TFRecords, or not Examples
    return
  if objectives.NEXT_SENTENCE_LABELS not in features:  # not pretraining records
    return
  masked = objectives.MASKED_LM_POSITIONS in features
  if masked and masking is not None:
    raise BertTfError(f"--dynamic_masking: {path} holds masked records; make them with "
                      f"create_pretraining_data.py --unmasked")
  if not masked and masking is None:
    raise BertTfError(f"--input_file: {path} holds unmasked records (create_pretraining_data.py "
                      f"--unmasked): add --dynamic_masking")
