"""Images: decode_image with one result contract for every decoder (Pillow, TorchCodec, torchvision, and GPU
batches with nvImageCodec / TorchCodec / torchvision), and the read modes shared with the converters.

>>> from tfr_torch import decode_image
>>> pixels = decode_image(open("cat.jpg", "rb").read(), "RGB")  # doctest: +SKIP
"""

from tfr_torch.images._pixels import MODES, normalize_mode
from tfr_torch.images.decode import BACKENDS, choose_backend, decode_image, image_backends

__all__ = ["BACKENDS", "MODES", "choose_backend", "decode_image", "image_backends", "normalize_mode"]
