#!/usr/bin/env python3
"""Writes a tiny Llama config.json (2 layers, hidden 64, GQA) to DIR;
with --tied, input and output embeddings tied (Llama 3.2's layout)."""
import sys

import transformers

transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=128,
                         tie_word_embeddings="--tied" in sys.argv[2:]).save_pretrained(sys.argv[1])
