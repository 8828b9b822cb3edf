"""Hugging Face ALBERT checkpoints -> odeserve model folders (`python3 -m odeserve_models import-albert`).

ALBERT shares one post-LN layer across its depth, so `h <- layer(h)` repeated L times is the
model, and `f(h) = layer(h) - h` is an autonomous ODE field whose L Euler steps of dt = 1 give
exactly the Hugging Face model's hidden states (docs/MODEL_CONTRACT.md).

  checkpoint.py    reads config.json, model.safetensors / pytorch_model.bin, spiece.model,
                   tokenizer_config.json; validates names and shapes (CheckpointError)
  module.py        the TorchScript module (input_stage / vector_field / output_stage / forward)
  tokenization.py  a pure-Python reference of Hugging Face's slow AlbertTokenizer
  importer.py      validation + model.pt, tokenizer.model, config.pbtxt
  cli.py           the command line
  synthetic.py     small random ALBERT checkpoints with Hugging Face key names (tests)
"""
