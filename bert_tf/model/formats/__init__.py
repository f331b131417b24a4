"""One module per model format a model directory can be in (bert_tf.model.model_files opens them)."""
