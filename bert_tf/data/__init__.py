"""Records and input pipelines: TFRecord schemas, packing, dynamic masking, windows, the pretraining data."""
