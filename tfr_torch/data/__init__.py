"""The torch layer: datasets for DataLoader, DDP and TPU, their sharding, shuffling and resumable state."""
