"""The CPU demos and what they are made of, outside the library: tiny models, synthetic data, figures.

| module        | does                                                                                 |
| ------------- | ------------------------------------------------------------------------------------ |
| `tinymodel`   | a small random-init Qwen2 with a trained tokenizer, offline (`rfthpc tiny-model`)     |
| `synth_gsm8k` | synthetic GSM8K-format problems (`rfthpc make-data`)                                 |
| `gsm8k`       | the arithmetic demo's model and data (`rfthpc make-demo`)                             |
| `frozenlake`  | the agentic demo's model and data (`rfthpc make-demo --task frozenlake`)               |
| `figures`     | a finished demo run's evaluations before and after RFT                               |

Tests and benchmarks build their models and data here too: nothing is downloaded.
"""
