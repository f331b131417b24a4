"""Records and input pipelines: TFRecord files and pretraining's schemas, packing, dynamic masking, the pretraining data."""
