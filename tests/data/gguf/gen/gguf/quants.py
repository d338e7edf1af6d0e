"""Shape helpers of gguf-py's quants module (the numpy (de)quantizers are not provided)."""
from .constants import GGML_QUANT_SIZES


class QuantError(Exception):
    pass


def quant_shape_to_byte_shape(shape, quant_type):
    block_size, type_size = GGML_QUANT_SIZES[quant_type]
    if shape[-1] % block_size != 0:
        raise ValueError(f"Quantized tensor row size ({shape[-1]}) is not a multiple of "
                         f"{quant_type.name} block size ({block_size})")
    return (*shape[:-1], shape[-1] // block_size * type_size)


def quant_shape_from_byte_shape(shape, quant_type):
    block_size, type_size = GGML_QUANT_SIZES[quant_type]
    if shape[-1] % type_size != 0:
        raise ValueError("byte shape is not a whole number of blocks")
    return (*shape[:-1], shape[-1] // type_size * block_size)


def dequantize(data, qtype):
    # ComfyUI-GGUF's numpy fallback, only reached for types dequant.py lacks; the test data has none.
    raise NotImplementedError(f"numpy dequantization of {qtype!r} is not provided by this stand-in")


def quantize(data, qtype):
    raise QuantError("quantization is done by sdflow's own generator (quantize.py), not this stand-in")
