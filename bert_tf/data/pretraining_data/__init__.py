"""The TensorFlow-free pretraining-data pipeline: the original create_pretraining_data algorithm (instances), corpus reading, record encoding and writing, the run, and its Beam form."""
