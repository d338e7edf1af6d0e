"""A stand-in for the `gguf` package (llama.cpp's gguf-py), which Debian does not ship.

It provides exactly what city96/ComfyUI-GGUF's dequant.py and loader.py use -- the enums and block
sizes (constants.py), GGUFReader with the same field/tensor shapes as gguf-py's reader
(gguf_reader.py) and quants.quant_shape_to_byte_shape -- plus the GGUFWriter subset our test-data
generator needs (gguf_writer.py). Written for sdflow's test data; no numerics of its own: the
dequantization under test is ComfyUI-GGUF's dequant.py, unmodified.
"""
from .constants import *  # noqa: F401,F403
from .gguf_reader import GGUFReader, ReaderField, ReaderTensor  # noqa: F401
from .gguf_writer import GGUFWriter  # noqa: F401
from . import quants  # noqa: F401
