"""Layout.count_rows (packed fine-tuning's rows per epoch) counts what packing the records in a
pipeline makes, without packing them."""
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.data import packing
from bert_tf.data import packing_finetune
from bert_tf.data import records
from bert_tf.tasks import glue
from bert_tf.tasks import swag

SEQ = 16


@pytest.mark.parametrize("seed", range(6))
def test_first_fit_rows_counts_the_rows_of_first_fit_decreasing(seed):
  rng = np.random.RandomState(seed)
  n, max_instances = rng.randint(1, 200), rng.randint(1, 9)
  lengths = rng.randint(2, SEQ + 1, size=n)
  placed = packing.first_fit_decreasing(tf.constant(lengths, tf.int32), SEQ, max_instances)
  assert packing.first_fit_rows(lengths, SEQ, max_instances) == int(tf.reduce_max(placed[:, 0])) + 1


def write_records(path, n, choices, rng):
  lengths = rng.randint(2, SEQ + 1, size=(n, choices))
  dicts = []
  for row in lengths:
    mask = np.concatenate([[1] * length + [0] * (SEQ - length) for length in row]).tolist()
    dicts.append({"input_ids": mask, "input_mask": mask, "segment_ids": [0] * len(mask),
                  "label_ids": [0], "is_real_example": [1]})
  records.write_records(path, dicts)


@pytest.mark.parametrize("n,choices,max_instances", [
    (70, 1, 4), (packing_finetune.WINDOW + 300, 1, None), (40, 4, 2)])
def test_count_rows_is_the_number_of_packed_rows(tmp_path, n, choices, max_instances):
  path = str(tmp_path / "records.tf_record")
  write_records(path, n, choices, np.random.RandomState(n))
  schema = (glue.classifier_features(SEQ) if choices == 1 else
            swag.multiple_choice_features(SEQ, choices))
  layout = packing_finetune.Layout(schema, SEQ, choices, max_instances)
  pipeline = layout._ordered_rows(path)  # pylint: disable=protected-access
  packed = int(pipeline.reduce(np.int64(0), lambda count, _: count + 1))
  assert layout.count_rows(path) == packed
  assert packed < n
