"""The decode layer: feature specs with TensorFlow's semantics, decoded in batches into torch tensors."""
