#!/usr/bin/env python3
"""Writes a tiny Gemma 3 config.json at the published head dim (256: per-head
q/k RMSNorm over 256 elements, attention at head dim 256) to DIR."""
import sys

import transformers

transformers.Gemma3TextConfig(vocab_size=256, hidden_size=64, intermediate_size=128,
                              num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                              head_dim=256, sliding_window=512, query_pre_attn_scalar=256,
                              max_position_embeddings=1024,
                              tie_word_embeddings=False).save_pretrained(sys.argv[1])
