"""bert_tf/data/pretraining_data/record_bytes.py against TensorFlow's own: RecordEncoder's bytes are what
tf.train.Example serializes (records.serialize), tfrecord_bytes what tf.io.TFRecordWriter writes."""
import os
import random

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import tensorflow as tf  # noqa: E402

from support.paths import shared_data  # noqa: E402
from bert_tf.data.pretraining_data import algorithm  # noqa: E402
from bert_tf.data.pretraining_data import corpus as corpus_module  # noqa: E402
from bert_tf.data.pretraining_data import record_bytes  # noqa: E402
from bert_tf.data.pretraining_data import record_writer  # noqa: E402
from bert_tf.data import records  # noqa: E402
from bert_tf.model import objectives  # noqa: E402
from bert_tf.text import tokenization  # noqa: E402


def test_encoder_gives_the_bytes_of_records_serialize(tmp_path):
  sample = os.path.join(shared_data("corpus", "bert-sample"), "sample_text.txt")
  tokenizer = tokenization.FullTokenizer(os.path.join(shared_data("vocab"), "bert-base-uncased-vocab.txt"))
  for options in [algorithm.Options(dupe_factor=2), algorithm.Options(dupe_factor=1, no_nsp=True),
                  algorithm.Options(dupe_factor=1, max_seq_length=300, masking=objectives.Masking(
                      max_predictions_per_seq=80, masked_lm_prob=0.3, do_whole_word_mask=True)),
                  algorithm.Options(dupe_factor=1, max_seq_length=16),
                  algorithm.Options(dupe_factor=1, unmasked=True)]:
    corpus = corpus_module.read_corpus([sample], tokenizer)
    vocab = algorithm.Vocab(tokenizer.vocab)
    instances, order = algorithm.InstanceMaker(corpus, vocab, options, random.Random(1)).create_training_instances()
    encoder = record_bytes.RecordEncoder(vocab, options)
    schema = (records.unmasked_pretraining_features(options.max_seq_length) if options.unmasked else
              records.pretraining_features(options.max_seq_length, options.max_predictions_per_seq))
    for index in range(len(instances)):
      features = record_writer.instance_features(corpus.tokens, instances, index, vocab, options)
      assert encoder.encode(corpus.tokens, instances, index) == records.serialize(features)
      assert [len(features[name]) for name in schema] == [spec.shape[0] for spec in schema.values()]


def test_tfrecord_bytes_are_what_tensorflow_writes(tmp_path):
  rng = random.Random(0)
  payloads = [b"", b"x", bytes(range(256)) * 9] + [rng.randbytes(rng.randint(0, 3000)) for _ in range(300)]
  path = str(tmp_path / "tf.tfrecord")
  with tf.io.TFRecordWriter(path) as writer:
    for payload in payloads:
      writer.write(payload)
  with open(path, "rb") as f:
    assert record_bytes.tfrecord_bytes(payloads) == f.read()
  assert record_bytes.tfrecord_bytes([]) == b""
