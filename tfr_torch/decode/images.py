"""decode_image lives in tfr_torch.images (decoders, read modes, the result contract); this name stays for imports
written before it moved."""

from tfr_torch.images import decode_image, image_backends

__all__ = ["decode_image", "image_backends"]
