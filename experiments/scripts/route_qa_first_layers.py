"""SmolLM2-135M cut to its first N layers: is a pretrained model's copying kept in a faster model? (research record,
run rq-02)

    python experiments/scripts/route_qa_first_layers.py N OUT

Writes an HF folder with the ``smollm2-135m`` preset's embeddings, first ``N`` of its 30 decoder layers, final norm
and tied LM head, and its tokenizer; prints the parameter count in millions.
"""

import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from verl.utils.model_presets import prepare_model

n, out = int(sys.argv[1]), sys.argv[2]
source = prepare_model("smollm2-135m")
model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
model.model.layers = model.model.layers[:n]
model.config.num_hidden_layers = n
if getattr(model.config, "layer_types", None):
    model.config.layer_types = model.config.layer_types[:n]
model.save_pretrained(out)
AutoTokenizer.from_pretrained(source).save_pretrained(out)
print(sum(p.numel() for p in model.parameters()) / 1e6)
