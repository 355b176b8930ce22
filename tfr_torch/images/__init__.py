"""Images: decode_image with one result contract for every decoder (Pillow, TorchCodec, torchvision, and GPU
batches with nvImageCodec / TorchCodec / torchvision), the read modes shared with the converters, batched image
transforms (ImageTransform), and DeviceLoader, which decodes and transforms the next batches on the GPU while the
current one trains.

>>> from tfr_torch import decode_image
>>> pixels = decode_image(open("cat.jpg", "rb").read(), "RGB")  # doctest: +SKIP
"""

from tfr_torch.images._pixels import MODES, normalize_mode
from tfr_torch.images.decode import BACKENDS, choose_backend, decode_image, image_backends
from tfr_torch.images.batch_decode import DecodeImages
from tfr_torch.images.loader import DeviceLoader
from tfr_torch.images.transforms import IMAGENET_MEAN, IMAGENET_STD, ImageTransform

__all__ = ["BACKENDS", "MODES", "DecodeImages", "DeviceLoader", "IMAGENET_MEAN", "IMAGENET_STD", "ImageTransform",
           "choose_backend", "decode_image", "image_backends", "normalize_mode"]
