"""Turn the GGUF file into an ordinary Hugging Face model directory.

The drafters and vLLM's speculative-decoding paths were checked against a
plain bf16 safetensors checkpoint (with the GGUF's own chat template), so we
convert once at preparation time and serve that directory.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any


class ConversionError(RuntimeError):
    """The GGUF file did not yield a complete, servable model directory."""


def convert_gguf(gguf_path: Path, out_dir: Path) -> None:
    """Write config.json, model.safetensors, tokenizer and generation config.

    ``out_dir`` must not hold a previous model; the caller builds into a fresh
    temporary directory and moves it into place once this returns.
    """
    if importlib.util.find_spec("accelerate") is None:
        # transformers refuses every GGUF model load without it; say so up front
        # instead of after the tokenizer has been parsed.
        raise ConversionError("loading a GGUF model needs the 'accelerate' package")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    src_dir, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(src_dir, gguf_file=name)
    if not tokenizer.chat_template:
        # Inventing a template would silently change how every chat request
        # is rendered; a GGUF without one is the wrong file for this gateway.
        raise ConversionError(f"{gguf_path} carries no tokenizer.chat_template")

    # Without dequantize=True, transformers keeps the blocks packed and then
    # refuses to save the model; we want plain bf16 tensors vLLM can load.
    model = AutoModelForCausalLM.from_pretrained(
        src_dir,
        gguf_file=name,
        dtype=torch.bfloat16,
        quantization_config=GgufConfig(dequantize=True),
    )
    if getattr(model.config, "quantization_config", None) is not None:
        raise ConversionError("transformers kept the GGUF weights quantized")
    _check_tied_head(model)

    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    if model.generation_config is not None:
        model.generation_config.save_pretrained(out_dir)
    _check_output(out_dir)
    # transformers 5 moves the template into chat_template.jinja; make sure a
    # fresh load (what vLLM does) still finds the very same template.
    reloaded = AutoTokenizer.from_pretrained(str(out_dir))
    if reloaded.chat_template != tokenizer.chat_template:
        raise ConversionError(f"chat template did not survive saving to {out_dir}")


def _check_tied_head(model: Any) -> None:
    """A GGUF without an ``output`` tensor means the head reuses the embeddings.

    If the config said otherwise, vLLM would allocate an untouched random LM
    head and the model would talk nonsense without any error.
    """
    tied = model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    if bool(model.config.tie_word_embeddings) != tied:
        raise ConversionError(
            f"tie_word_embeddings={model.config.tie_word_embeddings} but the LM head "
            f"{'is' if tied else 'is not'} the embedding matrix"
        )


def _check_output(out_dir: Path) -> None:
    required = ("config.json", "model.safetensors", "tokenizer.json",
                "tokenizer_config.json", "generation_config.json")
    missing = [name for name in required if not (out_dir / name).is_file()]
    if missing:
        raise ConversionError(f"conversion left out {missing} in {out_dir}")
